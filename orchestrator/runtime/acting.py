"""Turns that are Claude Code runs, on the daemon's side: whether a turn is one, the run card
it posts at once, and the run's end turned into the agent's reply.

When an agent with ``runtime: claude-code`` is asked and its ``code`` settings say this turn
acts (:func:`orchestrator.core.coding.decide_run`), the turn does not call the model: it
stores the run (``queued``), enqueues its job on the ``runs`` queue and posts a **run card**,
a notice that names the run and why the turn became one (``{reply id}:run``). The message is
then done and the group goes on: a question to another agent meanwhile is answered at once.

The worker runs it (:mod:`orchestrator.runtime.run_job`) and posts ``run=<id>`` on the inbound
stream when it ends. The daemon handles that entry in the group's order: the run's final text
becomes the agent's reply, with the id the turn's reply would have had, handled as any reply:
markers parsed, gated and stored; what it changed in the project, its cost and time under it;
hand-offs it makes routed on from the next hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from orchestrator.adapters.spawn import owner_gone
from orchestrator.core.coding import RunDecision, decide_run
from orchestrator.core.models import AgentSpec, ChatMessage, MessageKind
from orchestrator.core.routing import RuleSet
from orchestrator.core.wire import NOTICE_SENDER
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.run_meta import RunMeta
from orchestrator.memory.runs import RunRecord, RunStore
from orchestrator.runtime.answering import Draft
from orchestrator.runtime.team import Team

__all__ = ["Acting", "card_id", "run_job_id", "run_timeout_s"]

Enqueue = Callable[[str], Awaitable[None]]


def run_job_id(run_id: str) -> str:
    """The RQ job id of a run (RQ allows letters, digits, ``_`` and ``-``)."""
    return "run_" + "".join(c if c.isalnum() or c in "_-" else "_" for c in run_id)


def run_timeout_s(agents: Sequence[AgentSpec]) -> int:
    """How long a run's job may take: the longest wall-clock limit of the agents that act, and
    a little for the commit and the reply."""
    return int(max((a.code.wall_s for a in agents if a.code is not None), default=0)) + 300


def card_id(reply_id: str) -> str:
    """The id of a run's card: its reply's, with ``:run``."""
    return f"{reply_id}:run"


class Acting:
    """Decides which turns are runs and starts them (the daemon's part)."""

    def __init__(
        self, *, team: Team, runs: RunStore, enqueue: Enqueue, clock: Callable[[], datetime]
    ) -> None:
        self.team = team
        self.runs = runs
        self.enqueue = enqueue
        self.clock = clock
        self._rules = {a.id: RuleSet(a.code.rules, a.id) for a in team.agents if a.code is not None}

    def decide(self, agent: AgentSpec, text: str) -> RunDecision:
        """Whether ``agent``'s turn on ``text`` is a run, and why."""
        return decide_run(agent.code, self._rules.get(agent.id), text, agent.id)

    async def reap(self) -> list[RunRecord]:
        """The runs whose process died on this host, now recorded ``lost`` (their job may
        never come back: a worker killed with its whole process group)."""
        lost = []
        for run, owner in await asyncio.to_thread(self.runs.running):
            if owner is not None and owner_gone(owner):
                ended = await asyncio.to_thread(
                    self.runs.finish,
                    run.id,
                    status="lost",
                    text="",
                    problem="its worker stopped before the run ended",
                    outcome={},
                    now=self.clock(),
                )
                if ended is not None and ended.status == "lost":
                    lost.append(ended)
        return lost

    async def start(
        self,
        agent: AgentSpec,
        trigger: ChatMessage,
        root: ChatMessage,
        reply_id: str,
        hop: int,
        decision: RunDecision,
    ) -> Draft:
        """Store and enqueue the run (once, however often this is asked); its card."""
        now = self.clock()
        run, _ = await asyncio.to_thread(
            self.runs.create,
            run_id=reply_id,
            group=root.group,
            agent=agent.id,
            trigger_id=trigger.id,
            root_id=root.id,
            hop=hop,
            why=decision.why,
            now=now,
        )
        if run.status == "queued":
            await self.enqueue(run.id)  # enqueue-once: the job's id is the run's
        card = ChatMessage(
            id=card_id(reply_id),
            group=root.group,
            sender=NOTICE_SENDER,
            kind=MessageKind.NOTICE,
            text=f"{agent.name} started a run on the project ({decision.why})",
            created_at=now,
            in_reply_to=root.id,
            hop=hop,
        )
        meta = ReplyMeta(
            notice="run",
            agent=agent.id,
            trigger=trigger.id,
            run=RunMeta(id=run.id, status="queued", why=decision.why),
        )
        return Draft(message=card, meta=meta)
