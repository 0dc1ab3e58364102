"""The memory and knowledge tools an agent may call in its turn: their JSON schemas and input
checks.

Six tools, all on by default (an agent's YAML may list fewer, or ``tools: []``)::

    memory_search(query, scope?: group|personal|all, limit?)
    memory_get(id)
    memory_store(type, content, key?, confidence?, scope?: group|personal)
    memory_forget(id, reason)
    knowledge_search(query, limit?)
    knowledge_get(locator)

Every schema is strict (``additionalProperties: false``). :func:`parse_call` checks a call's
input against them and returns either a typed call or a one-line reason, never raises: a bad
call becomes a ``tool_result`` with ``is_error`` and the turn carries on. Running the calls
lives in ``memory.tools``; the loop that asks the model again in ``core.turns``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Literal, get_args

__all__ = [
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "MEMORY_TYPES",
    "PERSONAL_TOOL_TYPES",
    "TOOL_NAMES",
    "BadCall",
    "Forget",
    "Get",
    "KnowledgeGet",
    "KnowledgeSearch",
    "Search",
    "Store",
    "ToolCall",
    "ToolExchange",
    "ToolInput",
    "ToolName",
    "ToolResult",
    "describe",
    "parse_call",
    "schemas",
]

MAX_QUERY_CHARS: Final = 2000
MAX_CONTENT_CHARS: Final = 2000
MAX_LIMIT: Final = 20
ToolName = Literal[
    "memory_search",
    "memory_get",
    "memory_store",
    "memory_forget",
    "knowledge_search",
    "knowledge_get",
]
TOOL_NAMES: Final[tuple[str, ...]] = get_args(ToolName)
# The session memory types: what a marker or memory_store may save (memory.schema checks them).
MEMORY_TYPES: Final = (
    "decision",
    "requirement",
    "task",
    "fact",
    "preference",
    "constraint",
    "context",
    "event",
    "skill",
    "habit",
)

# The types memory_store offers that an agent's personal log also keeps (scope personal).
PERSONAL_TOOL_TYPES: Final = ("skill", "habit")

Scope = Literal["group", "personal", "all"]

_ID = {"type": "string", "description": "an id memory_search returned (m:<n> or a message id)"}
_SCHEMAS: Final[Mapping[str, Mapping[str, Any]]] = {
    "memory_search": {
        "description": "Search this group's memories and earlier messages, and your own "
        "personal memory. Results carry an id, a trust label, a date and a citation.",
        "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "scope": {"type": "string", "enum": ["group", "personal", "all"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        },
        "required": ["query"],
    },
    "memory_get": {
        "description": "Read one memory entry or message of this group, with its citation.",
        "properties": {"id": _ID},
        "required": ["id"],
    },
    "memory_store": {
        "description": "Save a memory (the same checks as a SAVE_MEMORY marker). A key "
        "replaces the entry stored under the same key. Scope personal keeps a skill or a habit "
        "in your own log.",
        "properties": {
            "type": {"type": "string", "enum": list(MEMORY_TYPES)},
            "content": {"type": "string", "maxLength": MAX_CONTENT_CHARS},
            "key": {"type": "string", "maxLength": 100},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "scope": {"type": "string", "enum": ["group", "personal"]},
        },
        "required": ["type", "content"],
    },
    "memory_forget": {
        "description": "Archive a memory entry you wrote (a person can restore it).",
        "properties": {"id": _ID, "reason": {"type": "string", "maxLength": 500}},
        "required": ["id", "reason"],
    },
    "knowledge_search": {
        "description": "Search the documents and project files you may read (this group's, "
        "yours, everyone's). Each result is a passage with its locator "
        "(path#Lstart-end@version) and its source's trust; cite the locator.",
        "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        },
        "required": ["query"],
    },
    "knowledge_get": {
        "description": "Read the lines a locator names (path#L12-40 or path#L12-40@version), "
        "as they are now, and whether they changed since it was cited.",
        "properties": {"locator": {"type": "string", "maxLength": 1000}},
        "required": ["locator"],
    },
}


@lru_cache(maxsize=256)
def schemas(names: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """The Messages API ``tools`` for ``names``, in that order (the same objects for the same
    names: every turn of an agent sends them; never change them)."""
    return tuple(
        {
            "name": name,
            "description": _SCHEMAS[name]["description"],
            "input_schema": {
                "type": "object",
                "properties": dict(_SCHEMAS[name]["properties"]),
                "required": list(_SCHEMAS[name]["required"]),
                "additionalProperties": False,
            },
        }
        for name in names
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One ``tool_use`` block the model sent: its id, the tool's name and its raw input."""

    id: str
    name: str
    input: object  # as the model sent it: checked by parse_call


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """What a call gave back: the ``tool_result`` text (one line when ``is_error``)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    input_chars: int = 0
    hits: int | None = None  # memory_search: how many results


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExchange:
    """One step of a turn's tool loop: what the model said and called, and our results."""

    text: str
    calls: tuple[ToolCall, ...]
    results: tuple[ToolResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Search:
    """``memory_search``, checked."""

    query: str
    scope: Scope = "all"
    limit: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Get:
    """``memory_get``, checked."""

    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Store:
    """``memory_store``, checked (the gate still judges the content)."""

    type: str
    content: str
    key: str | None = None
    confidence: float = 0.9
    scope: Literal["group", "personal"] = "group"


@dataclass(frozen=True, slots=True, kw_only=True)
class Forget:
    """``memory_forget``, checked."""

    id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeSearch:
    """``knowledge_search``, checked."""

    query: str
    limit: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeGet:
    """``knowledge_get``, checked (the locator's form is checked where it is resolved)."""

    locator: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BadCall:
    """Why a call cannot run, in one line."""

    reason: str


ToolInput = Search | Get | Store | Forget | KnowledgeSearch | KnowledgeGet


def parse_call(call: ToolCall, allowed: tuple[str, ...]) -> ToolInput | BadCall:
    """``call``'s input as a typed value, or why it is refused (one line)."""
    if call.name not in allowed:
        return BadCall(reason=f"unknown tool {call.name[:60]!r}")
    spec = _SCHEMAS[call.name]
    if not isinstance(call.input, Mapping):
        return BadCall(reason="the input must be a JSON object")
    extra = sorted(set(call.input) - set(spec["properties"]))
    if extra:
        return BadCall(reason=f"unknown field {str(extra[0])[:40]!r}")
    for name in spec["required"]:
        if name not in call.input:
            return BadCall(reason=f"{name} is required")
    for name, value in call.input.items():
        if (problem := _field_problem(name, value, spec["properties"][name])) is not None:
            return BadCall(reason=problem)
    personal = call.name == "memory_store" and call.input.get("scope") == "personal"
    if personal and call.input["type"] not in PERSONAL_TOOL_TYPES:
        kinds = ", ".join(PERSONAL_TOOL_TYPES)
        return BadCall(reason=f"type must be one of {kinds} with scope personal")
    return _build(call.name, call.input)


def _field_problem(name: str, value: Any, rule: Mapping[str, Any]) -> str | None:
    """What is wrong with one field, by its schema rule."""
    kind = rule["type"]
    if kind == "string":
        if not isinstance(value, str):
            return f"{name} must be a string"
        if not value.strip():
            return f"{name} must not be empty"
        if len(value) > rule.get("maxLength", 10**9):
            return f"{name} is too long ({len(value)} characters, at most {rule['maxLength']})"
        if "enum" in rule and value not in rule["enum"]:
            return f"{name} must be one of {', '.join(rule['enum'])}"
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer" and not (numeric and isinstance(value, int)):
        return f"{name} must be an integer"
    if not numeric:
        return f"{name} must be a number"
    if not rule["minimum"] <= value <= rule["maximum"]:
        return f"{name} must be within {rule['minimum']}..{rule['maximum']}"
    return None


def _build(name: str, data: Mapping[str, Any]) -> ToolInput:
    if name == "memory_search":
        return Search(
            query=data["query"], scope=data.get("scope", "all"), limit=data.get("limit", 5)
        )
    if name == "memory_get":
        return Get(id=data["id"].strip())
    if name == "knowledge_search":
        return KnowledgeSearch(query=data["query"], limit=data.get("limit", 5))
    if name == "knowledge_get":
        return KnowledgeGet(locator=data["locator"].strip())
    if name == "memory_store":
        return Store(
            type=data["type"],
            content=data["content"].strip(),
            key=data.get("key"),
            confidence=float(data.get("confidence", 0.9)),
            scope=data.get("scope", "group"),
        )
    return Forget(id=data["id"].strip(), reason=data["reason"].strip())


def describe(call: ToolCall, result: ToolResult) -> str:
    """One line for people: ``memory_search("database") → 2 hits``."""
    data = call.input if isinstance(call.input, Mapping) else {}
    keys = ("query", "id", "content", "locator")
    arg = next((data[k] for k in keys if isinstance(data.get(k), str)), "")
    shown = json.dumps(arg if len(arg) <= 40 else arg[:39] + "…", ensure_ascii=False)
    if result.is_error:
        outcome = f"error: {result.content[:80]}"
    elif result.hits is not None:
        outcome = f"{result.hits} hit{'' if result.hits == 1 else 's'}"
    else:
        outcome = result.content.split("\n", 1)[0][:80] or "done"
    return f"{call.name[:40]}({shown if arg else ''}) → {outcome}"
