"""What a Claude Code run is given and how it is followed, for its job
(:mod:`orchestrator.runtime.run_job`): the agent's context as a turn builds it, the model it
talks to, the knowledge tools (the sources its group and agent may read), each step kept and
published as it happens (a cancel honoured within a second), and the outcome in the agent's
daily log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.adapters.claude_code import ClaudeCode, RunOutcome, RunRequest, RunStep
from orchestrator.adapters.claude_tools import ExtraTool
from orchestrator.adapters.steps import StepPublisher
from orchestrator.core.context.report import ContextReport
from orchestrator.core.models import AgentSpec, LLMRequest
from orchestrator.core.tools import (
    BadCall,
    KnowledgeGet,
    KnowledgeSearch,
    ToolCall,
    parse_call,
    schemas,
)
from orchestrator.memory.runs import RunRecord, RunStore, StoredStep
from orchestrator.memory.schema import PersonalDraft
from orchestrator.runtime.gate import RunGate
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = [
    "CANCEL_POLL_S",
    "RunContext",
    "StepSink",
    "Unannounced",
    "compose",
    "follow",
    "knowledge_tools",
    "note_outcome",
    "preload",
    "publishing",
    "serving",
]

CANCEL_POLL_S = 1.0
_KNOWLEDGE_TOOLS = ("knowledge_search", "knowledge_get")


def knowledge_tools(wiring: Wiring, agent: AgentSpec, group: str) -> tuple[ExtraTool, ...]:
    """``knowledge_search`` and ``knowledge_get`` for a run of ``agent`` in ``group`` (those of
    the two its ``tools`` list), checked as a turn's calls are, on the sources it may read."""
    names = tuple(name for name in _KNOWLEDGE_TOOLS if name in agent.tools)
    knowledge = wiring.tools.knowledge
    if not names or knowledge is None:
        return ()
    found = knowledge

    def answering(name: str) -> Callable[[Mapping[str, Any]], Awaitable[str]]:
        async def answer(data: Mapping[str, Any]) -> str:
            parsed = parse_call(ToolCall(id=name, name=name, input=data), names)
            if isinstance(parsed, KnowledgeGet):
                return await asyncio.to_thread(
                    found.get, parsed.locator, group=group, agent=agent.id
                )
            if not isinstance(parsed, KnowledgeSearch):
                raise ValueError(parsed.reason if isinstance(parsed, BadCall) else "not known")
            text, _ = await asyncio.to_thread(
                found.search, parsed.query, parsed.limit, group=group, agent=agent.id
            )
            return text

        return answer

    return tuple(
        ExtraTool(
            name=spec["name"],
            description=spec["description"],
            schema=spec["input_schema"],
            call=answering(spec["name"]),
        )
        for spec in schemas(names)
    )


class RunContext:
    """What a run is told: the system prompt it adds, and the request, as a turn builds them."""

    def __init__(
        self, system: str, prompt: str, tokens: int, request: LLMRequest, report: ContextReport
    ) -> None:
        self.report = report  # the layers' tokens and the budget's cuts, as a turn records them
        self.system = system
        self.prompt = prompt
        self.tokens = tokens
        self.request = request  # as a turn would have sent it: what the caps count against


def compose(
    wiring: Wiring, agent: AgentSpec, run: RunRecord, project: Path, now: datetime
) -> RunContext:
    """The agent's context for a run, built as its turns are (the same layers and budgets);
    the conversation becomes the prompt, after a line naming the project's folder."""
    from orchestrator.core.context.build import build_context

    stored = wiring.history.get(run.trigger_id)
    if stored is None:
        raise LookupError(f"the message {run.trigger_id} the run answers is gone")
    trigger = stored.message
    gathered = wiring.briefing().gather(agent, trigger, now, mark_used=True)
    built = build_context(
        agent=agent,
        agents=wiring.team.agents,
        layers=gathered.layers,
        trigger=trigger,
        prompts=wiring.prompts,
        now=now.astimezone(wiring.tuning.zone),
        limits=wiring.tuning.limits(agent),
        transcript=wiring.transcript,
    )
    request = built.request
    turns = [f"[{turn['role']}]\n{turn['content']}" for turn in request.messages]
    prompt = (
        f"Project: {project}\n"
        "(the shared project: your changes there are committed for you when you finish)\n\n"
        + "\n\n".join(turns)
    )
    return RunContext(
        system=request.system + "\n\n" + request.system_tail,
        prompt=prompt,
        tokens=built.report.tokens.total,
        request=request,
        report=built.report,
    )


def note_outcome(wiring: Wiring, run: RunRecord, summary: str, now: datetime) -> None:
    """The run's outcome in the agent's daily log, citing the run (the heartbeat reads it)."""
    draft = PersonalDraft(content=summary, type="note")
    wiring.personal.append(run.agent, draft, source=f"{run.group}/run {run.id}", now=now)


StepSink = Callable[[RunRecord, StoredStep], Awaitable[None]]


async def follow(
    cli: ClaudeCode,
    request: RunRequest,
    run: RunRecord,
    runs: RunStore,
    publish: StepSink,
) -> RunOutcome:
    """Run the CLI, keeping and publishing each step, stopping when a cancel is asked for."""
    cancel = asyncio.Event()

    async def on_step(step: RunStep) -> None:
        stored = StoredStep(
            n=step.n,
            at=datetime.now(UTC),
            kind=step.kind,
            line=step.line,
            tool=step.tool,
            is_error=step.is_error,
            approval=step.approval,
        )
        await asyncio.to_thread(runs.add_step, run.id, stored)
        with contextlib.suppress(Exception):  # a step not shown live is still kept
            await publish(run, stored)

    async def watch() -> None:
        while not cancel.is_set():
            await asyncio.sleep(CANCEL_POLL_S)
            now = await asyncio.to_thread(runs.get, run.id)
            if now is not None and now.cancel_requested:
                cancel.set()

    watcher = asyncio.create_task(watch())
    try:
        return await cli.run(request, on_step, cancel)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def preload() -> None:
    """What every run would load again in its own forked process, loaded once in the run
    worker before it forks: the tokenizer's encoding (about 0.4 s a run otherwise), the
    context's modules and the prompt templates' engine."""
    from orchestrator.core.context.build import build_context  # noqa: F401
    from orchestrator.core.context.tokens import TokenCounter

    TokenCounter().count("preload")


def publishing(steps: StepPublisher, gate: RunGate | None) -> StepSink:
    """Each step published as it is kept: on the group's steps stream and MQTT (and the
    agent's words told to the gate: why it asks)."""

    async def publish(record: RunRecord, step: StoredStep) -> None:
        if gate is not None and step.kind == "text":
            gate.heard(step.line)
        await steps.publish(record.group, step.as_step(record.id))

    return publish


class Unannounced:
    """Cap warnings from a worker are not announced: the daemon announces its own."""

    def publish(self, topic: str, payload: bytes) -> None:
        """Drop the event."""


@contextlib.contextmanager
def serving(settings: Settings) -> Iterator[tuple[str, str | None]]:
    """The model the CLI talks to: Anthropic's API with a key; without one, the offline model
    served on a local Messages API for the run's length."""
    key = settings.anthropic_api_key
    if key is not None:
        yield key.get_secret_value(), settings.anthropic_base_url
        return
    from orchestrator.adapters.messages_api import MessagesApiServer

    with MessagesApiServer() as server:
        yield "offline", server.base_url
