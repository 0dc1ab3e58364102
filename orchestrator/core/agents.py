"""Agent definitions: ``agents/*.yaml`` into ``AgentSpec``, and each agent's workspace.

One file per agent, named after its id (``agents/architect.yaml``), loaded in file-name order,
which is also the order that breaks routing ties. Every field but ``id``, ``name``, ``role`` and
``model`` is optional; unknown fields are errors::

    id: architect                   # ^[a-z0-9][a-z0-9_-]{0,63}$, equal to the file name
    name: Architect                 # shown in chats; ``@Architect`` mentions it too
    role: software architect
    description: Designs systems, weighs trade-offs and keeps the big picture.
    model: claude-sonnet-4-5
    models: {fast: claude-haiku-4-5, reasoning: claude-opus-4-1}   # optional hints
    temperature: 0.4                # 0 to 1, default 0.7
    max_tokens: 1024                # default 1024
    max_concurrency: 4              # turns in flight at once, default 4
    caps: {tokens_per_day: 50000, usd_per_day: 2.5}   # optional; this agent's own daily caps
    tools: [memory_search, memory_get]   # tools it may call; default all six, [] none
    default: false                  # exactly one agent may be the default
    routing:
      rules:
        - name: design              # default: "<id>#<index>"
          keywords: [architecture, design, schema, 架构]   # any one, case-insensitive
          patterns: ['\\bAPI\\b']    # any one, Python regular expressions, case-insensitive
          min_length: 1             # characters of the stripped text, not bytes
          max_length: 4000
          priority: 50              # highest matching rule wins, default 0
          agents: [architect]       # who answers; default: this agent

A rule matches when every condition it has holds; it needs at least one. Ids and names must be
unique across files, ignoring case and spaces, so every ``@mention`` names one agent, and not
read as ``arena``, ``system`` or ``user``. A key given twice in one mapping is an error.
Mistakes raise ``AgentDefinitionError`` naming the file and the field, e.g.
``agents/developer.yaml: routing.rules[0].patterns[1]: invalid regular expression: ...``.

Each agent's folder ``workspaces/<id>/`` holds ``CLAUDE.md`` (its role) and ``SOUL.md`` (its soul).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic import ValidationError as PydanticValidationError

from orchestrator.core.agent_file import read_document
from orchestrator.core.models import AGENT_ID_RE, PROFILES, AgentSpec, CodeSpec, RoutingRule
from orchestrator.core.tools import TOOL_NAMES, ToolName
from orchestrator.core.validation import agent_handle
from orchestrator.errors import AgentDefinitionError, ValidationError

__all__ = ["MAX_TOKENS_PER_DAY", "MAX_USD_PER_DAY", "load_agents", "read_identity", "workspace_dir"]

logger = logging.getLogger(__name__)

IDENTITY_FILES = ("CLAUDE.md", "SOUL.md")
# The largest daily caps accepted (``caps:``): finite, so a limit always fits a counter
# (settings.py holds the same bounds for the ``ARENA_CAP_*`` variables).
MAX_TOKENS_PER_DAY = 10**12
MAX_USD_PER_DAY = 10**9
# A non-blank string, and a non-blank single line; both are stripped.
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
_Line = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200, pattern=r"^\S.*$")
]

# Plainer words than pydantic's for the mistakes people make most in these files.
_PROBLEMS = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": "must be a single line of text",
    "string_unicode": "must be valid Unicode text",
    "model_type": "must be a mapping of fields (key: value lines)",
    "dict_type": "must be a mapping (key: value lines)",
}
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _RuleModel(_Model):
    name: _Line | None = None
    keywords: list[_Text] = []
    patterns: list[_Text] = []
    min_length: int | None = Field(default=None, ge=0)
    max_length: int | None = Field(default=None, ge=0)
    priority: int = 0
    agents: list[str] | None = None


class _RoutingModel(_Model):
    rules: list[_RuleModel] = []


class _ContextModel(_Model):
    window: int | None = Field(default=None, ge=256)
    reserved_output: int | None = Field(default=None, ge=1)
    identity: int | None = Field(default=None, ge=1)
    summary: int | None = Field(default=None, ge=0)
    memory_md: int | None = Field(default=None, ge=0)
    logs: int | None = Field(default=None, ge=0)
    recall: int | None = Field(default=None, ge=0)


class _RecallModel(_Model):
    relevance_floor: float | None = Field(default=None, ge=0.0, le=1.0)
    max_entries: int | None = Field(default=None, ge=0, le=100)
    char_budget: int | None = Field(default=None, ge=0)
    require_source: bool | None = None
    exclude_untrusted: bool | None = None
    knowledge_entries: int | None = Field(default=None, ge=0, le=20)
    knowledge_tokens: int | None = Field(default=None, ge=0, le=20_000)
    lore_tokens: int | None = Field(default=None, ge=0, le=20_000)


class _CapsModel(_Model):
    tokens_per_day: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_DAY)
    usd_per_day: float | None = Field(default=None, gt=0, le=MAX_USD_PER_DAY, allow_inf_nan=False)


class _CodeModel(_Model):  # ``code:``; see orchestrator.core.coding
    acts: Literal["always", "rules"] | None = None
    rules: list[_RuleModel] = []
    profile: Literal["reader", "editor", "tester"] = "reader"
    tools: list[_Line] | None = None
    permission_mode: Literal["dontAsk", "acceptEdits", "plan", "default"] = "default"
    commands: list[_Line] | None = None
    max_turns: int = Field(default=30, ge=1, le=500)
    inactivity_s: float = Field(default=300.0, gt=0, le=86_400, allow_inf_nan=False)
    wall_s: float = Field(default=1800.0, gt=0, le=86_400, allow_inf_nan=False)


class _AgentModel(_Model):
    id: Annotated[str, AfterValidator(agent_handle)]
    name: Annotated[_Line, AfterValidator(agent_handle)]
    role: _Line
    description: str = ""
    model: _Line
    models: dict[_Line, _Line] = {}
    temperature: float = Field(default=0.7, ge=0.0, le=1.0)
    max_tokens: int = Field(default=1024, ge=1)
    max_concurrency: int = Field(default=4, ge=1)
    default: bool = False
    routing: _RoutingModel = _RoutingModel()
    context: _ContextModel = _ContextModel()
    recall: _RecallModel = _RecallModel()
    caps: _CapsModel = _CapsModel()
    tools: list[ToolName] = list(TOOL_NAMES)  # type: ignore[arg-type]
    runtime: Literal["messages", "claude-code"] = "messages"
    code: _CodeModel | None = None


def load_agents(folder: Path) -> tuple[AgentSpec, ...]:
    """Load every ``*.yaml`` file in ``folder``, sorted by file name.

    Args:
        folder: the agents folder, usually ``Settings.agents_dir``.

    Returns:
        The agents, in file-name order.

    Raises:
        AgentDefinitionError: naming the first bad file and field.
    """
    if not folder.is_dir():
        raise AgentDefinitionError(str(folder), "", "not a folder")
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        raise AgentDefinitionError(str(folder), "", "no agent definitions (*.yaml) found")
    agents: list[AgentSpec] = []
    sources: dict[str, Path] = {}  # agent id -> file
    handles: dict[str, Path] = {}  # casefolded id or name -> file, for unambiguous mentions
    for path in paths:
        spec = _load_file(path)
        if spec.id in sources:
            raise AgentDefinitionError(
                str(path), "id", f"duplicate id {spec.id!r}, already used in {sources[spec.id]}"
            )
        if spec.id != path.stem:
            raise AgentDefinitionError(
                str(path), "id", f"{spec.id!r} does not match the file name {path.name!r}"
            )
        _claim_handles(spec, path, handles)
        sources[spec.id] = path
        agents.append(spec)
    _check_defaults(agents, sources)
    _check_rule_agents(agents, sources)
    logger.debug("loaded %d agents from %s", len(agents), folder)
    return tuple(agents)


def _load_file(path: Path) -> AgentSpec:
    where = str(path)
    model = _validate(where, read_document(path))
    if not AGENT_ID_RE.fullmatch(model.id):
        raise AgentDefinitionError(where, "id", f"{model.id!r} must match {AGENT_ID_RE.pattern}")
    _check_rule_names(where, model.routing.rules)
    rules = tuple(
        _build_rule(where, index, rule, model.id) for index, rule in enumerate(model.routing.rules)
    )
    return AgentSpec(
        id=model.id,
        name=model.name,
        role=model.role,
        description=model.description.strip(),
        model=model.model,
        models=dict(model.models),
        temperature=model.temperature,
        max_tokens=model.max_tokens,
        max_concurrency=model.max_concurrency,
        default=model.default,
        rules=rules,
        context=model.context.model_dump(exclude_none=True),
        recall=model.recall.model_dump(exclude_none=True),
        caps=model.caps.model_dump(exclude_none=True),
        tools=tuple(dict.fromkeys(model.tools)),
        runtime=model.runtime,
        code=_code(where, model),
    )


def _code(where: str, model: _AgentModel) -> CodeSpec | None:
    """The agent's ``code:`` with defaults (acts "always" when it has no rules)."""
    code = model.code
    if model.runtime != "claude-code":
        if code is not None:
            raise AgentDefinitionError(where, "code", "is only read with runtime: claude-code")
        return None
    code = code or _CodeModel()
    _check_rule_names(where, code.rules, "code.rules")
    rules = tuple(
        _build_rule(where, i, rule, model.id, "code.rules") for i, rule in enumerate(code.rules)
    )
    if any(rule.agents != (model.id,) for rule in rules):
        raise AgentDefinitionError(where, "code.rules", "a run is the agent's own: no agents")
    tools = tuple(dict.fromkeys(code.tools)) if code.tools is not None else PROFILES[code.profile]
    values = code.model_dump(exclude={"acts", "rules", "tools", "commands"})
    commands = tuple(dict.fromkeys(code.commands)) if code.commands is not None else None
    try:
        acts = code.acts or ("rules" if rules else "always")
        return CodeSpec(acts=acts, rules=rules, tools=tools, commands=commands, **values)
    except ValueError as exc:
        raise AgentDefinitionError(where, "code", str(exc)) from None


def _validate(where: str, document: dict[object, object]) -> _AgentModel:
    """Check types and fields, reporting pydantic's first complaint in our own words."""
    try:
        return _AgentModel.model_validate(document)
    except PydanticValidationError as exc:
        error = exc.errors()[0]
        loc = error["loc"]
        problem = _PROBLEMS.get(error["type"], error["msg"].removeprefix("Value error, "))
        if loc and loc[-1] == "[key]":  # pydantic's marker for a bad mapping key
            loc, problem = loc[:-1], f"key {problem}"
        raise AgentDefinitionError(where, _field_path(loc), problem) from None


def _check_rule_names(
    where: str, rules: Sequence[_RuleModel], field: str = "routing.rules"
) -> None:
    names: dict[str, int] = {}
    for index, rule in enumerate(rules):
        if rule.name is not None and names.setdefault(rule.name, index) != index:
            raise AgentDefinitionError(
                where,
                f"{field}[{index}].name",
                f"{rule.name!r} is already the name of {field}[{names[rule.name]}]",
            )


def _build_rule(
    where: str, index: int, rule: _RuleModel, owner: str, prefix: str = "routing.rules"
) -> RoutingRule:
    field = f"{prefix}[{index}]"
    for position, pattern in enumerate(rule.patterns):
        try:
            re.compile(pattern, re.IGNORECASE)
        except (re.error, OverflowError, RecursionError) as exc:
            raise AgentDefinitionError(
                where, f"{field}.patterns[{position}]", f"invalid regular expression: {exc}"
            ) from None
    if rule.agents is not None and not rule.agents:
        raise AgentDefinitionError(where, f"{field}.agents", "must name at least one agent")
    if (
        rule.min_length is not None
        and rule.max_length is not None
        and rule.min_length > rule.max_length
    ):
        raise AgentDefinitionError(where, f"{field}.min_length", "is greater than max_length")
    try:
        return RoutingRule(
            agents=tuple(dict.fromkeys(rule.agents or [owner])),
            name=rule.name or "",
            keywords=tuple(rule.keywords),
            patterns=tuple(rule.patterns),
            min_length=rule.min_length,
            max_length=rule.max_length,
            priority=rule.priority,
        )
    except ValueError as exc:
        raise AgentDefinitionError(where, field, str(exc)) from None


def _claim_handles(spec: AgentSpec, path: Path, handles: dict[str, Path]) -> None:
    """Refuse an id or name that would make an ``@mention`` ambiguous."""
    for field, value in (
        ("id", spec.id),
        ("name", spec.name),
        ("name", "".join(spec.name.split())),
    ):
        key = value.casefold()
        owner = handles.get(key)
        if owner is not None and owner != path:
            raise AgentDefinitionError(
                str(path), field, f"{value!r} is already an id or name in {owner}"
            )
        handles[key] = path


def _check_defaults(agents: Sequence[AgentSpec], sources: dict[str, Path]) -> None:
    defaults = [agent.id for agent in agents if agent.default]
    if len(defaults) > 1:
        raise AgentDefinitionError(
            str(sources[defaults[1]]),
            "default",
            f"more than one default agent (also {sources[defaults[0]]})",
        )


def _check_rule_agents(agents: Sequence[AgentSpec], sources: dict[str, Path]) -> None:
    for agent in agents:
        for index, rule in enumerate(agent.rules):
            for position, target in enumerate(rule.agents):
                if target not in sources:
                    raise AgentDefinitionError(
                        str(sources[agent.id]),
                        f"routing.rules[{index}].agents[{position}]",
                        f"unknown agent {target!r}",
                    )


def _field_path(loc: tuple[int | str, ...]) -> str:
    """``("routing", "rules", 0, "patterns", 1)`` -> ``routing.rules[0].patterns[1]``.

    Mapping keys that are not plain names (``models``' keys, unknown fields) are quoted.
    """
    text = ""
    for part in loc:
        if isinstance(part, int) or not _PLAIN_KEY.fullmatch(part):
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else part
    return text


def workspace_dir(workspaces: Path, agent_id: str) -> Path:
    """The folder holding an agent's identity and memory files: ``workspaces/<agent_id>``.

    Args:
        workspaces: the workspaces folder, usually ``Settings.workspaces_dir``.
        agent_id: the agent's id.

    Raises:
        ValidationError: if ``agent_id`` is not a valid id or the folder would lie outside
            ``workspaces`` (through ``..``, a separator, or a symbolic link).
    """
    if not isinstance(agent_id, str) or not AGENT_ID_RE.fullmatch(agent_id):
        raise ValidationError("agent_id", f"invalid agent id {agent_id!r}")
    path = workspaces / agent_id
    root = workspaces.resolve()
    resolved = path.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise ValidationError("agent_id", f"workspace of {agent_id!r} lies outside {workspaces}")
    return path


def read_identity(workspaces: Path, agent_id: str) -> tuple[str, str]:
    """An agent's ``CLAUDE.md`` (role) and ``SOUL.md`` (personality); ``""`` when missing.

    This reads files: call it through ``asyncio.to_thread`` from async code.

    Raises:
        ValidationError: as ``workspace_dir`` does.
    """
    folder = workspace_dir(workspaces, agent_id)
    return _read_text(folder / IDENTITY_FILES[0]), _read_text(folder / IDENTITY_FILES[1])


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
