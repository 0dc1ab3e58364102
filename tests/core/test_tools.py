"""Tests for orchestrator.core.tools: the memory tools' schemas, their input checks and the
agent YAML's ``tools`` field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.core.agents import load_agents
from orchestrator.core.tools import (
    MAX_QUERY_CHARS,
    TOOL_NAMES,
    BadCall,
    Forget,
    Get,
    Search,
    Store,
    ToolCall,
    parse_call,
    schemas,
)
from orchestrator.errors import AgentDefinitionError
from orchestrator.memory.schema import validate_memory
from orchestrator.settings import Settings

AGENT = {"id": "architect", "name": "Architect", "role": "architect", "model": "m"}


def call(name: str, data: object) -> ToolCall:
    return ToolCall(id="toolu_1", name=name, input=data)


def test_schemas_are_strict_objects():
    """Each tool's schema is an object that allows no extra property."""
    tools = schemas(TOOL_NAMES)
    assert [t["name"] for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert tool["input_schema"]["type"] == "object"
        assert tool["input_schema"]["additionalProperties"] is False
        assert set(tool["input_schema"]["required"]) <= set(tool["input_schema"]["properties"])


def test_every_type_memory_store_offers_passes_the_schema_gate():
    """memory_store offers the types a marker may save: each passes the gate's schema, and a
    personal-only type (lesson) is not offered."""
    (store,) = [t for t in schemas(TOOL_NAMES) if t["name"] == "memory_store"]
    offered = store["input_schema"]["properties"]["type"]["enum"]
    for kind in offered:
        assert validate_memory({"type": kind, "content": "We deploy on Fridays"}).type == kind
    assert "lesson" not in offered


def test_good_calls_become_typed_inputs():
    """Valid inputs come back as typed values with their defaults."""
    assert parse_call(call("memory_search", {"query": "db"}), TOOL_NAMES) == Search(query="db")
    assert parse_call(
        call("memory_search", {"query": "db", "scope": "group", "limit": 3}), TOOL_NAMES
    ) == Search(query="db", scope="group", limit=3)
    assert parse_call(call("memory_get", {"id": " m:3 "}), TOOL_NAMES) == Get(id="m:3")
    assert parse_call(
        call("memory_store", {"type": "decision", "content": " Use Postgres ", "key": "db"}),
        TOOL_NAMES,
    ) == Store(type="decision", content="Use Postgres", key="db")
    assert parse_call(
        call("memory_forget", {"id": "m:1", "reason": "wrong"}), TOOL_NAMES
    ) == Forget(id="m:1", reason="wrong")


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("shell", {"cmd": "ls"}, "unknown tool 'shell'"),
        ("memory_search", ["db"], "the input must be a JSON object"),
        ("memory_search", {}, "query is required"),
        ("memory_search", {"query": 3}, "query must be a string"),
        ("memory_search", {"query": "  "}, "query must not be empty"),
        ("memory_search", {"query": "x" * (MAX_QUERY_CHARS + 1)}, "query is too long"),
        ("memory_search", {"query": "db", "limit": "3"}, "limit must be an integer"),
        ("memory_search", {"query": "db", "limit": True}, "limit must be an integer"),
        ("memory_search", {"query": "db", "limit": 500}, "limit must be within 1..20"),
        ("memory_search", {"query": "db", "scope": "world"}, "scope must be one of"),
        ("memory_search", {"query": "db", "sql": "drop"}, "unknown field 'sql'"),
        ("memory_store", {"type": "gossip", "content": "x"}, "type must be one of"),
        (
            "memory_store",
            {"type": "fact", "content": "x", "confidence": 2},
            "confidence must be within 0..1",
        ),
        ("memory_forget", {"id": "m:1"}, "reason is required"),
    ],
)
def test_bad_calls_give_one_line_reasons(name, data, reason):
    """Wrong types, unknown tools and fields, huge queries and limits are refused in one line."""
    result = parse_call(call(name, data), TOOL_NAMES)
    assert isinstance(result, BadCall)
    assert result.reason.startswith(reason)
    assert "\n" not in result.reason


def test_a_tool_the_agent_lacks_is_unknown():
    """A tool left out of the agent's list is refused like an unknown one."""
    result = parse_call(call("memory_store", {"type": "fact", "content": "x"}), ("memory_get",))
    assert result == BadCall(reason="unknown tool 'memory_store'")


def write(folder: Path, extra: dict[str, object]) -> Path:
    (folder / "architect.yaml").write_text(yaml.safe_dump({**AGENT, **extra}), encoding="utf-8")
    return folder


def test_agents_get_all_tools_by_default(tmp_path):
    """An agent whose YAML says nothing of tools may call all four."""
    (agent,) = load_agents(write(tmp_path, {}))
    assert agent.tools == TOOL_NAMES


def test_agents_can_have_fewer_tools_or_none(tmp_path):
    """``tools: [...]`` narrows the list, ``tools: []`` turns them off."""
    (agent,) = load_agents(write(tmp_path, {"tools": ["memory_search", "memory_search"]}))
    assert agent.tools == ("memory_search",)
    (agent,) = load_agents(write(tmp_path, {"tools": []}))
    assert agent.tools == ()


def test_unknown_tool_names_are_refused(tmp_path):
    """An unknown tool in the YAML is an error naming the file and the field."""
    with pytest.raises(AgentDefinitionError, match=r"architect.yaml: tools\[0\]"):
        load_agents(write(tmp_path, {"tools": ["shell"]}))


def test_max_tool_steps_setting(monkeypatch):
    """ARENA_MAX_TOOL_STEPS defaults to 4 and is read from the environment."""
    assert Settings().max_tool_steps == 4
    monkeypatch.setenv("ARENA_MAX_TOOL_STEPS", "2")
    assert Settings().max_tool_steps == 2
