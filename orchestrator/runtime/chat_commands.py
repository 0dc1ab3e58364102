"""Commands a person types in a group for the arena, not for the agents: ``/approve ID
[--always] [note…]`` and ``/deny ID [note…]`` decide a run's request for approval as the
message's sender, through :meth:`~orchestrator.runtime.approving.Approvals.decide` (so only
the owner's count; anyone else is refused). The pipeline routes such a message to no agent and
answers it with a notice: one line, the verdict's message (:func:`answer`).

Only a message whose text starts with the command word is one: ``/approved`` or a ``/deny`` in
the middle of a sentence goes to the agents as any other message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from orchestrator.errors import ValidationError

if TYPE_CHECKING:
    from orchestrator.runtime.approving import Approvals

__all__ = ["NOT_HERE", "ChatCommand", "answer", "parse_command"]

NOT_HERE = "approvals are not available here"
_COMMAND = re.compile(r"^\s*/(?P<name>approve|deny)(?=\s|$)\s*(?P<rest>.*)$", re.DOTALL)
_USAGE = {"approve": "/approve ID [--always] [note…]", "deny": "/deny ID [note…]"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatCommand:
    """A command typed in a group: what to decide, or, when it is malformed, what to say."""

    name: Literal["approve", "deny"]
    approval_id: str = ""
    always: bool = False
    note: str | None = None
    problem: str | None = None

    @property
    def route(self) -> dict[str, object]:
        """What the message records as its route: a command, answered by the arena."""
        return {
            "agents": [],
            "reason": "command",
            "rule": None,
            "keywords_hit": [],
            "detail": f"/{self.name}: a command for the arena, not for the agents",
        }


def parse_command(text: str) -> ChatCommand | None:
    """The command ``text`` is (None: it is a message for the agents)."""
    found = _COMMAND.match(text)
    if found is None:
        return None
    name: Literal["approve", "deny"] = "approve" if found["name"] == "approve" else "deny"
    words = found["rest"].split(maxsplit=1)
    if not words or words[0] == "--always":
        return ChatCommand(name=name, problem=f"usage: {_USAGE[name]}")
    approval_id, rest = words[0], words[1] if len(words) > 1 else ""
    always = False
    flag = rest.split(maxsplit=1)
    if flag and flag[0] == "--always":
        if name == "deny":
            return ChatCommand(name=name, problem=f"--always goes with /approve: {_USAGE[name]}")
        always, rest = True, flag[1] if len(flag) > 1 else ""
    note = rest.strip() or None
    return ChatCommand(name=name, approval_id=approval_id, always=always, note=note)


async def answer(command: ChatCommand, *, sender: str, approvals: Approvals | None) -> str:
    """Carry ``command`` out as ``sender``; the notice's line (the verdict's message, or why
    nothing was decided)."""
    if command.problem is not None:
        return command.problem
    if approvals is None:
        return NOT_HERE
    try:
        verdict = await approvals.decide(
            command.approval_id,
            approve=command.name == "approve",
            by=sender,
            note=command.note,
            always=command.always,
        )
    except ValidationError as exc:
        return str(exc)
    return verdict.message
