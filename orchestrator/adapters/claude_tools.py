"""Tools of the arena's own that a Claude Code run may call (the knowledge tools), served to the
CLI in this process by the SDK as an MCP server named ``arena``: the CLI sees each one as
``mcp__arena__<name>``. Each tool is read-only, so it is allowed without asking."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import claude_agent_sdk as sdk

__all__ = ["SERVER", "ExtraTool", "allowed_names", "mcp_servers"]

SERVER = "arena"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtraTool:
    """A tool: its name, description and JSON schema, and what answers a call (its input in,
    the result's text out; an exception becomes an error result)."""

    name: str
    description: str
    schema: Mapping[str, Any]
    call: Callable[[Mapping[str, Any]], Awaitable[str]]


def allowed_names(tools: Sequence[ExtraTool]) -> list[str]:
    """The names the CLI knows ``tools`` by, for its allowed tools."""
    return [f"mcp__{SERVER}__{tool.name}" for tool in tools]


def _served(tool: ExtraTool) -> sdk.SdkMcpTool[Any]:
    async def answer(args: dict[str, Any]) -> dict[str, Any]:
        try:
            text = await tool.call(args)
        except Exception as exc:  # the run goes on; the model reads what went wrong
            return {"content": [{"type": "text", "text": str(exc)[:500]}], "is_error": True}
        return {"content": [{"type": "text", "text": text}]}

    return sdk.tool(tool.name, tool.description, dict(tool.schema))(answer)


def mcp_servers(tools: Sequence[ExtraTool]) -> dict[str, Any]:
    """The SDK's ``mcp_servers`` option serving ``tools`` (none: no server)."""
    if not tools:
        return {}
    served = [_served(tool) for tool in tools]
    return {SERVER: sdk.create_sdk_mcp_server(name=SERVER, version="1.0.0", tools=served)}
