"""What an agent sees at its turn: the system prompt and the group's recent conversation.

Everyone's messages are shown to every agent. The agent's own earlier replies become
``assistant`` turns; everything else becomes ``user`` turns labelled with who wrote it.
Marker-shaped text in what others wrote is neutralised so that quoting a marker can never
make an agent save something.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from orchestrator.memory.markers import neutralise
from orchestrator.models import AgentSpec, ChatMessage, LLMRequest, MessageKind
from orchestrator.prompts import Prompts

__all__ = ["Identity", "Reference", "build_request", "conversation", "references"]


class Cited(Protocol):
    """Where a recalled memory came from."""

    @property
    def ref(self) -> str: ...

    @property
    def locator(self) -> str: ...


class Reference(Protocol):
    """A recalled memory as the context needs it (``memory.recall.Snippet`` is one)."""

    @property
    def type(self) -> str: ...

    @property
    def trust(self) -> str: ...

    @property
    def score(self) -> float: ...

    @property
    def content(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...

    @property
    def citation(self) -> Cited | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """An agent's identity files: CLAUDE.md (its role) and SOUL.md (its character)."""

    claude: str = ""
    soul: str = ""


def _label(message: ChatMessage) -> str:
    if message.kind is MessageKind.NOTICE:
        return f"[arena notice]: {message.text}"
    return f"[{message.sender} ({message.kind.value})]: {neutralise(message.text)}"


def conversation(
    agent_id: str, history: Sequence[ChatMessage], trigger: ChatMessage
) -> tuple[Mapping[str, str], ...]:
    """Turn the group's history into alternating user/assistant turns ending with the trigger.

    Consecutive turns of the same role are merged; the conversation starts with a user turn.
    """
    ordered = [m for m in history if m.id != trigger.id] + [trigger]
    turns: list[dict[str, str]] = []
    for message in ordered:
        own = message.kind is MessageKind.AGENT and message.sender == agent_id
        role = "assistant" if own and message is not trigger else "user"
        text = message.text if role == "assistant" else _label(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + text
        else:
            turns.append({"role": role, "content": text})
    while turns and turns[0]["role"] != "user":
        turns.pop(0)
    return tuple(turns)


def references(snippets: Sequence[Reference]) -> list[dict[str, Any]]:
    """Recalled memories as the template shows them: neutralised, with trust and citation."""
    items = []
    for n, snippet in enumerate(snippets, start=1):
        citation = snippet.citation
        items.append(
            {
                "n": n,
                "type": snippet.type,
                "trust": snippet.trust,
                "score": f"{snippet.score:.2f}",
                "content": neutralise(snippet.content),
                "source": citation.locator or citation.ref if citation else "no source",
                "date": snippet.created_at.strftime("%Y-%m-%d"),
            }
        )
    return items


def build_request(
    *,
    agent: AgentSpec,
    agents: Sequence[AgentSpec],
    identity: Identity,
    trigger: ChatMessage,
    history: Sequence[ChatMessage],
    prompts: Prompts,
    now: datetime,
    tz: str,
    recalled: Sequence[Reference] = (),
) -> LLMRequest:
    """Build the model request for ``agent``'s turn on ``trigger``."""
    roster = [{"id": a.id, "name": a.name, "role": a.role} for a in agents]
    variables: dict[str, Any] = {
        "agent": agent,
        "identity": identity,
        "roster": roster,
        "group": trigger.group,
        "trigger": trigger,
        "now": now.strftime("%Y-%m-%d %H:%M"),
        "tz": tz,
        "references": references(recalled),
    }
    system = prompts.render("system.md.j2", **variables).strip()
    tail = prompts.render("turn.md.j2", **variables).strip()
    return LLMRequest(
        agent=agent,
        trigger=trigger,
        model=agent.model,
        system=f"{system}\n\n{tail}",
        messages=conversation(agent.id, history, trigger),
        max_tokens=agent.max_tokens,
        temperature=agent.temperature,
    )
