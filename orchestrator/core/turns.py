"""One agent's turn: call the model, run the memory tools it asks for, then separate what
people see from the memory markers.

The tool loop: while the model stops to call tools (``Completion.tool_calls``), each call is
run by the turn's :class:`ToolRunner` and the model is asked again with the results, up to
``max_steps`` rounds; the last round may call no more tools. Every round is a call of the
``LLM`` given, so a capped provider checks and counts each one. The last answer's text is the
reply; its markers work as without tools.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from orchestrator.core.markers import InvalidMarker, Marker, parse_markers
from orchestrator.core.models import Completion, LLMRequest
from orchestrator.core.quick_init import quick_init
from orchestrator.core.tools import ToolCall, ToolExchange, ToolResult

__all__ = ["LLM", "ToolRunner", "TurnResult", "run_turn"]


class LLM(Protocol):
    """A model provider (Anthropic, or the offline one)."""

    name: str

    @property
    def offline(self) -> bool:
        """Whether this is the offline model: it is never asked for what can be made without
        it (distillation, summaries), costs nothing and counts its input in words."""
        ...

    async def complete(self, request: LLMRequest) -> Completion:
        """Answer one request."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class ToolRunner(Protocol):
    """Runs one tool call of this turn; never raises (a failure is an ``is_error`` result)."""

    async def __call__(self, call: ToolCall) -> ToolResult:
        """The call's result."""
        ...


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    """What an agent said, split into the visible reply and its markers.

    ``completion`` is the last model call's; ``steps`` every call's, in order, and
    ``exchanges`` the tool calls made between them.
    """

    agent_id: str
    visible: str
    completion: Completion
    markers: tuple[Marker, ...]
    invalid: tuple[InvalidMarker, ...]
    steps: tuple[Completion, ...] = ()
    exchanges: tuple[ToolExchange, ...] = ()


async def run_turn(
    request: LLMRequest, llm: LLM, tools: ToolRunner | None = None, max_steps: int = 0
) -> TurnResult:
    """Ask the model, run the tools it calls (at most ``max_steps`` rounds), parse its answer.

    Raises:
        LLMError: when a model call fails.
    """
    if tools is None or max_steps <= 0 or not request.tools:
        request = replace(request, tools=(), exchanges=())
    completion = await llm.complete(request)
    steps = [completion]
    exchanges: list[ToolExchange] = []
    while completion.tool_calls and request.tools and len(exchanges) < max_steps:
        assert tools is not None  # request.tools is emptied without a runner
        results = tuple([await tools(call) for call in completion.tool_calls])
        exchanges.append(
            ToolExchange(text=completion.text, calls=completion.tool_calls, results=results)
        )
        request = replace(
            request, exchanges=tuple(exchanges), may_call_tools=len(exchanges) < max_steps
        )
        completion = await llm.complete(request)
        steps.append(completion)
    parsed = parse_markers(completion.text)
    return TurnResult(
        agent_id=request.agent.id,
        visible=parsed.visible,
        completion=completion,
        markers=parsed.markers,
        invalid=parsed.invalid,
        steps=tuple(steps),
        exchanges=tuple(exchanges),
    )
