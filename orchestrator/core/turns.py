"""One agent's turn: call the model, then separate what people see from the memory markers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from orchestrator.core.markers import InvalidMarker, Marker, parse_markers
from orchestrator.core.models import Completion, LLMRequest

__all__ = ["LLM", "TurnResult", "run_turn"]


class LLM(Protocol):
    """A model provider (Anthropic, or the offline one)."""

    name: str

    async def complete(self, request: LLMRequest) -> Completion:
        """Answer one request."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    """What an agent said, split into the visible reply and its markers."""

    agent_id: str
    visible: str
    completion: Completion
    markers: tuple[Marker, ...]
    invalid: tuple[InvalidMarker, ...]


async def run_turn(request: LLMRequest, llm: LLM) -> TurnResult:
    """Ask the model and parse its answer.

    Raises:
        LLMError: when the model call fails.
    """
    completion = await llm.complete(request)
    parsed = parse_markers(completion.text)
    return TurnResult(
        agent_id=request.agent.id,
        visible=parsed.visible,
        completion=completion,
        markers=parsed.markers,
        invalid=parsed.invalid,
    )
