"""The Messages API's shapes for the local server (``messages_api``): a model's turn as the API's
message body, or as the server-sent events that stream it, and an error body. Pure: no I/O.

The stream follows the API's order: ``message_start`` (the message without its content, with
the input usage), ``ping``, then per content block ``content_block_start``, up to three
``content_block_delta`` (``text_delta`` for text, ``input_json_delta`` for a ``tool_use``'s
input as JSON) and ``content_block_stop``, then ``message_delta`` (the stop reason and the
output usage) and ``message_stop``.

Usage counts words, not tokens: input is the words of the system prompt and of the messages'
text, tool inputs (as JSON) and tool results; output the words of the answer's text and tool
inputs (as JSON). The model named in the request is echoed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator.offline.coder import Block, Text, Turn

__all__ = ["error_body", "input_words", "message_body", "sse_events"]

_PIECES = 3
_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 500: "api_error"}


def message_body(request: Mapping[str, Any], turn: Turn, *, message_id: str) -> dict[str, Any]:
    """The API's message for ``turn``, the answer to ``request``.

    Args:
        request: The request body; its ``model`` is echoed, its words are the input usage.
        turn: What the model answers.
        message_id: The message's ``id``.

    Returns:
        The message, as a non-streaming request gets it in JSON.
    """
    content = [_block(block) for block in turn.content]
    output = sum(_words(b.get("text", "")) + _words(_dumps(b.get("input"))) for b in content)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": request.get("model"),
        "content": content,
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_words(request),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output,
        },
    }


def sse_events(message: Mapping[str, Any]) -> Iterator[bytes]:
    """The server-sent events that stream ``message`` (a :func:`message_body`), in order."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"message": start})
    yield _event("ping", {})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening, deltas = {**block, "text": ""}, _deltas("text_delta", "text", block["text"])
        else:
            opening = {**block, "input": {}}
            deltas = _deltas("input_json_delta", "partial_json", _dumps(block["input"]))
        yield _event("content_block_start", {"index": index, "content_block": opening})
        for delta in deltas:
            yield _event("content_block_delta", {"index": index, "delta": delta})
        yield _event("content_block_stop", {"index": index})
    ending = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _event(
        "message_delta", {"delta": ending, "usage": {"output_tokens": usage["output_tokens"]}}
    )
    yield _event("message_stop", {})


def error_body(status: int, message: str) -> bytes:
    """The API's error body: ``{"type": "error", "error": {"type": ..., "message": ...}}``."""
    error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}
    return _dumps({"type": "error", "error": error}).encode()


def input_words(request: Mapping[str, Any]) -> int:
    """A request's input usage: the words of its system prompt and messages."""
    system = request.get("system", "")
    words = _words(system if isinstance(system, str) else _text_of(system))
    for message in request.get("messages", []):
        content = message.get("content", "") if isinstance(message, dict) else ""
        words += _words(content if isinstance(content, str) else _text_of(content))
    return words


def _block(block: Block) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}


def _deltas(kind: str, key: str, text: str) -> list[dict[str, str]]:
    """``text`` in up to three deltas, as a stream delivers it (one empty delta if empty)."""
    size = max(1, -(-len(text) // _PIECES))
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    return [{"type": kind, key: piece} for piece in pieces]


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {_dumps({'type': name, **data})}\n\n".encode()


def _text_of(blocks: Any) -> str:
    """The words a list of content blocks carries: texts, tool inputs, tool results."""
    parts: list[str] = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            parts.append(_dumps(block.get("input")))
        elif block.get("type") == "tool_result":
            inner = block.get("content", "")
            parts.append(inner if isinstance(inner, str) else _text_of(inner))
        else:
            parts.append(str(block.get("text", "")))
    return " ".join(parts)


def _words(text: str) -> int:
    return len(text.split())


def _dumps(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False)
