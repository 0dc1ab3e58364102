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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.adapters.checkouts import Checkout
from orchestrator.adapters.claude_code import ClaudeCode, RunRequest
from orchestrator.adapters.mqtt_broker import publisher_url
from orchestrator.adapters.project import Project
from orchestrator.adapters.redis_client import AsyncConnection, connect_async, translated
from orchestrator.adapters.spawn import end_with_parent, process_owner
from orchestrator.adapters.steps import StepPublisher
from orchestrator.caps.guard import make_guard
from orchestrator.caps.limits import OverCap
from orchestrator.core.approvals import Ask
from orchestrator.core.coding import run_ended_fields
from orchestrator.core.models import AgentSpec, Completion
from orchestrator.core.wire import inbox_stream
from orchestrator.errors import OrchestratorError
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunRecord, RunStore, StoredStep
from orchestrator.runtime.gate import gate_for
from orchestrator.runtime.run_parts import (
    RunContext,
    Unannounced,
    compose,
    follow,
    knowledge_tools,
    note_outcome,
    preload,
    publishing,
    serving,
)
from orchestrator.runtime.run_results import commit, dollars_left, log_line, outcome_json
from orchestrator.runtime.run_waits import Paused, cap_ask, cap_verdict, decisions_prompt, merged
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["execute", "git_run_id", "preload", "run_job"]  # preload: the worker calls it here

logger = logging.getLogger(__name__)


def git_run_id(run_id: str) -> str:
    """The run's name in the project (its branch ``arena/<name>`` and folder): the run's id
    in lower-case letters, digits and dashes, with a short digest when it had to be shortened
    or changed, so two runs never share one."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-") or "run"
    if slug == run_id and len(slug) <= 64:
        return slug
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:10]
    return f"{slug[:50].rstrip('-')}-{digest}"


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
    over_cap = paused is not None and paused.cap is not None  # the person said yes to it
    stopped = await _take(wiring, run, project, paused, name)
    if stopped is not None:
        return stopped
    paused = None if over_cap else paused  # a run let past a cap starts now
    agent = wiring.team.get(run.agent)
    if agent.code is None:
        return _end(runs, run, "failed", f"{agent.id} no longer acts (runtime)", {})
    prepared = await _prepare(wiring, project, agent, run, paused, where / "project", now)
    if isinstance(prepared, str):
        return _end(runs, run, "failed", prepared, {})
    checkout, context, workspace = prepared

    guard = make_guard(settings, redis, wiring.team.agents, Unannounced())
    try:  # woken by a decision, it was admitted when it started (or let past a cap)
        reservation = await guard.admit(
            agent.id, run.group, agent.model, lambda: context.tokens,
            continuing=paused is not None or over_cap,
        )  # fmt: skip
    except OverCap as exc:
        await asyncio.to_thread(project.cancel, checkout)
        await guard.aclose()
        if agent.code.permission_mode != "default":
            return _end(runs, run, "failed", f"not started: {exc}", {})
        return await _ask_cap(settings, wiring, run, redis, cap_ask(context.tokens, str(exc),
                                                                    str(workspace)))  # fmt: skip
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
            steps_before=len(runs.steps(run.id)),
            tools=knowledge_tools(wiring, agent, run.group),
        )
        runner = cli or ClaudeCode(settings.data_dir / "runs", cli=settings.claude_cli)
        async with StepPublisher(redis, publisher_url(settings)) as steps:
            outcome = await follow(runner, request, run, runs, publishing(steps, gate))
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


async def _prepare(
    wiring: Wiring, project: Project, agent: AgentSpec, run: RunRecord, paused: Paused | None,
    where: Path, now: datetime,
) -> tuple[Checkout, RunContext, Path] | str:  # fmt: skip
    """The run's checkout (its own, or the one it stopped in), its context and the agent's
    workspace (the CLI's working directory); else why it cannot run."""
    try:
        await asyncio.to_thread(project.ensure)
        if paused is None:
            checkout = await asyncio.to_thread(project.start, git_run_id(run.id), where)
        elif (found := paused.checkout_of(git_run_id(run.id))) is not None:
            checkout = found
        else:
            return f"its checkout {paused.checkout} is gone"
        context = await asyncio.to_thread(compose, wiring, agent, run, checkout.path, now)
        workspace = wiring.personal.workspace(agent.id)
        workspace.mkdir(parents=True, exist_ok=True)
    except (OrchestratorError, LookupError) as exc:
        return str(exc)
    return checkout, context, workspace


async def _take(
    wiring: Wiring, run: RunRecord, project: Project, paused: Paused | None, name: str
) -> RunRecord | None:
    """Claim the run (or claim it back from waiting); the run as it is now when it is not
    this job's to run: lost, cancelled, taken by another job, or refused going past a cap."""
    runs = wiring.runs
    if run.status == "running":  # a worker took it and died: never run it twice
        return _end(runs, run, "lost", "its worker stopped before the run ended", {})
    if run.cancel_requested:
        checkout = paused.checkout_of(name) if paused is not None else None
        if checkout is not None:
            with contextlib.suppress(OrchestratorError):
                await asyncio.to_thread(project.cancel, checkout)
        why = "cancelled before it started" if paused is None else "cancelled while it waited"
        for asked in await asyncio.to_thread(
            wiring.approvals.listed, run_id=run.id, state="pending"
        ):
            # withdrawn by the run's own agent: nothing is left to decide
            await asyncio.to_thread(
                wiring.approvals.close, asked.id, "cancelled", by=run.agent, now=datetime.now(UTC)
            )
        return _end(runs, run, "cancelled", why, {})
    owner = process_owner()
    if paused is not None:
        taken = runs.resume(run.id, owner)
    else:
        taken = runs.claim(run.id, datetime.now(UTC), owner)
    if not taken:
        return runs.get(run.id) or run
    if paused is not None and paused.cap is not None:
        refused = await asyncio.to_thread(cap_verdict, wiring.approvals, paused.cap)
        if refused is not None:
            return _end(runs, run, "failed", f"not started: {refused}", {})
    return None


async def _ask_cap(
    settings: Settings, wiring: Wiring, run: RunRecord, redis: AsyncConnection, ask: Ask
) -> RunRecord:
    """A run past a daily cap asks the person whether to go on today, and waits (unstarted)."""
    from datetime import timedelta

    record, _ = await asyncio.to_thread(
        wiring.approvals.request, run_id=run.id, group=run.group, agent=run.agent, ask=ask,
        why="", decider=settings.owner, now=datetime.now(UTC),
        expires_in=timedelta(seconds=settings.approval_expiry_s),
    )  # fmt: skip
    step = StoredStep(n=len(wiring.runs.steps(run.id)) + 1, at=datetime.now(UTC),
                      kind="approval", line=f"asks {record.id}: {ask.reason}", tool=ask.tool,
                      approval=record.id)  # fmt: skip
    await asyncio.to_thread(wiring.runs.add_step, run.id, step)
    async with StepPublisher(redis, publisher_url(settings)) as steps:
        with contextlib.suppress(OrchestratorError):
            await steps.publish(run.group, step.as_step(run.id))
    paused = Paused(session_id="", checkout="", base="", cap=record.id)
    return await _pause(settings, wiring, run, paused)


async def _pause(settings: Settings, wiring: Wiring, run: RunRecord, paused: Paused) -> RunRecord:
    """The run waits for a decision; one that came as it stopped wakes it at once."""
    from orchestrator.runtime.acting import run_timeout_s
    from orchestrator.runtime.approving import wake_now

    await asyncio.to_thread(wiring.runs.wait, run.id, paused.as_json())
    logger.info("run %s: waiting for a decision", run.id)
    waiting = await asyncio.to_thread(wiring.runs.get, run.id) or run
    await wake_now(settings, wiring.approvals, waiting, run_timeout_s(wiring.team.agents))
    return waiting


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
