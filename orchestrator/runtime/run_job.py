"""A Claude Code run as durable background work: the RQ job that runs one, on the ``runs``
queue, in an ``arena worker`` of its own.

The daemon stored the run (``queued``) and enqueued this job under the run's id. The job:

1. claims the run (a run found ``running`` was started by a worker that died: it is reported
   ``lost``, never run twice; one asked to stop before it started is ``cancelled``);
2. gives it its own checkout of the shared project (a git worktree and branch, see
   :mod:`orchestrator.adapters.project`);
3. builds the agent's context as a turn does (identity, ``MEMORY.md``, logs, summary, recall,
   the transcript, within the same budgets) and reserves the run against the daily caps;
4. runs Claude Code (:mod:`orchestrator.adapters.claude_code`) against the model (Anthropic's
   API with a key, else the offline model served on a local Messages API), each step kept
   and published as it happens (the group's steps stream and MQTT,
   :mod:`orchestrator.adapters.steps`), a cancel asked for in the console or CLI honoured
   within a second;
5. commits what it changed with the agent as author, brings it into the project (or leaves
   its branch for review), settles the caps, notes the outcome in the agent's daily log
   (so the heartbeat learns from real work) and records the run's end;
6. posts ``run=<id>`` on the inbound stream: the daemon then handles the run's final text
   as any agent reply (markers, hand-offs, storing, publishing), in the group's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import signal
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.adapters.claude_code import ClaudeCode, RunOutcome, RunRequest, RunStep
from orchestrator.adapters.mqtt_broker import publisher_url
from orchestrator.adapters.project import Project
from orchestrator.adapters.redis_client import AsyncConnection, connect_async, translated
from orchestrator.adapters.spawn import end_with_parent, process_owner
from orchestrator.adapters.steps import StepPublisher
from orchestrator.caps.guard import make_guard
from orchestrator.caps.limits import OverCap
from orchestrator.core.coding import run_ended_fields
from orchestrator.core.context.report import ContextReport
from orchestrator.core.models import AgentSpec, Completion, LLMRequest
from orchestrator.core.wire import inbox_stream
from orchestrator.errors import OrchestratorError
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunRecord, RunStore, StoredStep
from orchestrator.memory.schema import PersonalDraft
from orchestrator.runtime.gate import RunGate, gate_for
from orchestrator.runtime.run_results import commit, dollars_left, log_line, outcome_json
from orchestrator.runtime.run_waits import Paused, decisions_prompt, merged
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["RunContext", "compose", "execute", "git_run_id", "note_outcome", "preload", "run_job"]

logger = logging.getLogger(__name__)

CANCEL_POLL_S = 1.0


def git_run_id(run_id: str) -> str:
    """The run's name in the project (its branch ``arena/<name>`` and folder): the run's id
    in lower-case letters, digits and dashes, with a short digest when it had to be shortened
    or changed, so two runs never share one."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-") or "run"
    if slug == run_id and len(slug) <= 64:
        return slug
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:10]
    return f"{slug[:50].rstrip('-')}-{digest}"


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


def run_job(run_id: str) -> dict[str, Any]:
    """Run the Claude Code run ``run_id`` (an RQ job on the ``runs`` queue)."""
    from orchestrator.settings import load_settings

    # RQ runs a job in a process of its own group: when the worker dies, so does the run (and
    # with it the CLI and all it started), instead of going on unseen.
    end_with_parent(signal.SIGTERM)
    settings = load_settings()
    return asyncio.run(execute(settings, run_id))


async def execute(
    settings: Settings, run_id: str, *, cli: ClaudeCode | None = None
) -> dict[str, Any]:
    """Everything a run's job does (see the module docstring); what became of it."""
    engine = make_engine(settings.effective_database_url)
    redis = connect_async(settings.effective_redis_url)
    try:
        wiring = Wiring(settings, engine)
        runs = RunStore(engine)
        run = runs.get(run_id)
        if run is None:
            return {"run": run_id, "status": "unknown"}
        if not run.ended:
            run = await _run(settings, wiring, runs, run, redis, cli)
        if run.status == "waiting":  # for a decision: its reply comes when it ends
            return {"run": run.id, "status": run.status}
        # Whoever asks: the daemon posts the reply once, however often this is said.
        with translated():
            await redis.xadd(inbox_stream(), run_ended_fields(run.group, run.id))  # type: ignore[arg-type]
        return {"run": run.id, "status": run.status}
    finally:
        await redis.aclose()
        engine.dispose()


async def _run(
    settings: Settings,
    wiring: Wiring,
    runs: RunStore,
    run: RunRecord,
    redis: AsyncConnection,
    cli: ClaudeCode | None,
) -> RunRecord:
    now = datetime.now(UTC)
    project = Project(settings.project)
    name = git_run_id(run.id)
    where = settings.data_dir / "runs" / name
    paused = Paused.read(run.outcome) if run.status == "waiting" else None
    stopped = await _take(runs, run, project, paused, name)
    if stopped is not None:
        return stopped
    agent = wiring.team.get(run.agent)
    if agent.code is None:
        return _end(runs, run, "failed", f"{agent.id} no longer acts (runtime)", {})
    try:
        await asyncio.to_thread(project.ensure)
        if paused is None:
            checkout = await asyncio.to_thread(project.start, name, where / "project")
        elif (found := paused.checkout_of(name)) is not None:
            checkout = found
        else:
            raise LookupError(f"its checkout {paused.checkout} is gone")
        context = await asyncio.to_thread(compose, wiring, agent, run, checkout.path, now)
        workspace = wiring.personal.workspace(agent.id)  # the CLI's working directory
        workspace.mkdir(parents=True, exist_ok=True)
    except (OrchestratorError, LookupError) as exc:
        return _end(runs, run, "failed", str(exc), {})

    guard = make_guard(settings, redis, wiring.team.agents, _Unannounced())
    try:  # woken by a decision, it was admitted when it started
        reservation = await guard.admit(
            agent.id, run.group, agent.model, lambda: context.tokens, continuing=paused is not None
        )
    except OverCap as exc:
        await asyncio.to_thread(project.cancel, checkout)
        await guard.aclose()
        return _end(runs, run, "failed", f"not started: {exc}", {})
    budget = await dollars_left(guard, agent.id, run.group)
    gate = gate_for(settings, wiring, agent, run, (workspace, checkout.path, where / "claude"))
    prompt = context.prompt
    if paused is not None:
        prompt = await asyncio.to_thread(decisions_prompt, wiring.approvals, run.id) or "Go on."
    with serving(settings) as (key, base_url):
        request = RunRequest(
            prompt=prompt,
            system=context.system,
            workspace=workspace,
            project=checkout.path,
            config_dir=where / "claude",
            model=agent.model,
            code=agent.code,
            api_key=key,
            base_url=base_url,
            max_budget_usd=budget,
            gate=gate,
            resume=paused.session_id if paused is not None else None,
            steps_before=len(runs.steps(run.id)) if paused is not None else 0,
        )
        runner = cli or ClaudeCode(settings.data_dir / "runs", cli=settings.claude_cli)
        async with StepPublisher(redis, publisher_url(settings)) as steps:
            outcome = await follow(runner, request, run, runs, _publishing(steps, gate))
    spent = Completion(
        text=outcome.text, model=agent.model, provider="claude-code", usage=outcome.usage
    )
    try:
        await guard.settle(reservation, context.request, spent)  # a stopped run is charged too
    except OrchestratorError as exc:
        logger.warning("run %s: its tokens were not counted: %s", run.id, exc)
    finally:
        await guard.aclose()
    if outcome.status == "waiting":
        return await _pause(settings, wiring, run, Paused.of(outcome, checkout, paused))
    outcome = merged(outcome, paused)
    project_out = await asyncio.to_thread(commit, project, checkout, agent, run, outcome)
    summary = log_line(agent.name, outcome, project_out)
    with contextlib.suppress(Exception):
        await asyncio.to_thread(note_outcome, wiring, run, summary, datetime.now(UTC))
    result = outcome_json(outcome, project_out) | {"context": context.report.as_json()}
    return _end(runs, run, outcome.status, outcome.problem, result, outcome.text)


async def _take(
    runs: RunStore, run: RunRecord, project: Project, paused: Paused | None, name: str
) -> RunRecord | None:
    """Claim the run (or claim it back from waiting); the run as it is now when it is not
    this job's to run: lost, cancelled, or taken by another job."""
    if run.status == "running":  # a worker took it and died: never run it twice
        return _end(runs, run, "lost", "its worker stopped before the run ended", {})
    if run.cancel_requested:
        checkout = paused.checkout_of(name) if paused is not None else None
        if checkout is not None:
            with contextlib.suppress(OrchestratorError):
                await asyncio.to_thread(project.cancel, checkout)
        why = "cancelled before it started" if paused is None else "cancelled while it waited"
        return _end(runs, run, "cancelled", why, {})
    owner = process_owner()
    if paused is not None:
        taken = runs.resume(run.id, owner)
    else:
        taken = runs.claim(run.id, datetime.now(UTC), owner)
    return None if taken else (runs.get(run.id) or run)


async def _pause(settings: Settings, wiring: Wiring, run: RunRecord, paused: Paused) -> RunRecord:
    """The run waits for a decision; one that came as it stopped wakes it at once."""
    from orchestrator.runtime.acting import run_timeout_s
    from orchestrator.runtime.approving import wake_now

    await asyncio.to_thread(wiring.runs.wait, run.id, paused.as_json())
    logger.info("run %s: waiting for a decision", run.id)
    waiting = await asyncio.to_thread(wiring.runs.get, run.id) or run
    await wake_now(settings, wiring.approvals, waiting, run_timeout_s(wiring.team.agents))
    return waiting


def _publishing(steps: StepPublisher, gate: RunGate | None) -> StepSink:
    """Each step published as it is kept: on the group's steps stream and MQTT (and the
    agent's words told to the gate: why it asks)."""

    async def publish(record: RunRecord, step: StoredStep) -> None:
        if gate is not None and step.kind == "text":
            gate.heard(step.line)
        await steps.publish(record.group, step.as_step(record.id))

    return publish


def _end(
    runs: RunStore,
    run: RunRecord,
    status: str,
    problem: str | None,
    outcome: dict[str, Any],
    text: str = "",
) -> RunRecord:
    logger.info("run %s: %s%s", run.id, status, f" ({problem})" if problem else "")
    ended = runs.finish(
        run.id, status=status, text=text, problem=problem, outcome=outcome, now=datetime.now(UTC)
    )
    return ended or run


class _Unannounced:
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
