"""The RQ job functions: what an ``arena worker`` runs for each kind of job.

RQ stores a job's function by its dotted path, so these three are importable at this one
stable path, ``orchestrator.background.jobs.<name>``: moving or renaming one strands the jobs
already queued under the old name. Enqueueing them (ids, dedup, retries) is
:mod:`orchestrator.background.queue`'s work.

Job functions are module-level, sync and take ids; each reads ``Settings`` from the
environment it inherits from ``arena up``, opens its own database engine, model client and,
for a new ``MEMORY.md`` version, MQTT client, and returns a JSON-able dict of the outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from typing import Any

import aiomqtt
from sqlalchemy.engine import Engine

from orchestrator.adapters.metrics import record_job
from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.adapters.mqtt_broker import publisher_url
from orchestrator.adapters.providers import build_llm
from orchestrator.background.distill import run_distillation
from orchestrator.background.retention import prune
from orchestrator.background.summary import run_summary
from orchestrator.core.turns import LLM
from orchestrator.core.wire import growth_topic
from orchestrator.memory.db import make_engine
from orchestrator.memory.versions.run import Outcome
from orchestrator.settings import Settings, load_settings

__all__ = ["distill_job", "prune_job", "summary_job"]

logger = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 5.0


def distill_job(agent_id: str, day_iso: str, trigger: str) -> dict[str, Any]:
    """Distil ``agent_id``'s log of ``day_iso`` into a new ``MEMORY.md`` (an RQ job)."""
    settings = load_settings()
    day = date.fromisoformat(day_iso)
    return _counted(
        settings, "distill", lambda: asyncio.run(_distill(settings, agent_id, day, trigger))
    )


def summary_job(group: str, upto_seq: int | None, trigger: str) -> dict[str, Any]:
    """Update ``group``'s rolling summary up to message ``upto_seq`` (an RQ job)."""
    settings = load_settings()
    return _counted(
        settings, "summary", lambda: asyncio.run(_summarise(settings, group, upto_seq, trigger))
    )


def prune_job(day_iso: str, trigger: str) -> dict[str, Any]:
    """Delete what the retention settings say is too old (an RQ job; ``day_iso`` names the
    run, the ages are measured from when it runs)."""
    settings = load_settings()

    def run() -> dict[str, Any]:
        engine = make_engine(settings.effective_database_url)
        try:
            report = prune(engine, settings, datetime.now(UTC))
        finally:
            engine.dispose()
        return {"kind": "prune", "day": day_iso, "trigger": trigger, **report.as_dict()}

    return _counted(settings, "prune", run)


def _counted(settings: Settings, kind: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a job's body and count its outcome for ``GET /metrics``: its status (``done`` when
    it has none), or ``error`` when it raised (RQ retries it)."""
    try:
        result = run()
    except Exception:
        record_job(settings.effective_redis_url, kind, "error")
        raise
    record_job(settings.effective_redis_url, kind, str(result.get("status", "done")))
    return result


async def _distill(settings: Settings, agent_id: str, day: date, trigger: str) -> dict[str, Any]:
    async def run(engine: Engine, llm: LLM, now: datetime) -> Outcome:
        return await run_distillation(settings, engine, llm, agent_id, day, trigger, now)

    result = {"kind": "distill", "agent": agent_id, "day": day.isoformat(), "trigger": trigger}
    result |= await _run(settings, run)
    _log_outcome(result, f"{agent_id} {day}")
    if result["status"] == "written":
        await _publish_growth(settings, agent_id, result)
    return result


async def _summarise(
    settings: Settings, group: str, upto_seq: int | None, trigger: str
) -> dict[str, Any]:
    async def run(engine: Engine, llm: LLM, now: datetime) -> Outcome:
        return await run_summary(settings, engine, llm, group, upto_seq, trigger, now)

    result = {"kind": "summary", "group": group, "upto": upto_seq, "trigger": trigger}
    result |= await _run(settings, run)
    _log_outcome(result, f"{group} up to {'latest' if upto_seq is None else upto_seq}")
    return result


async def _run(
    settings: Settings, run: Callable[[Engine, LLM, datetime], Awaitable[Outcome]]
) -> dict[str, Any]:
    """Open the database and the model for one run, and report what came of it."""
    started = time.monotonic()
    engine = await asyncio.to_thread(make_engine, settings.effective_database_url)
    llm = build_llm(settings)
    try:
        outcome = await run(engine, llm, datetime.now(UTC))
    finally:
        await llm.aclose()
        engine.dispose()
    return {
        "status": str(outcome.status),
        "version": outcome.version,
        "reason": outcome.reason,
        "tokens": outcome.tokens,
        "duration_s": round(time.monotonic() - started, 3),
    }


def _log_outcome(result: dict[str, Any], what: str) -> None:
    logger.info(
        "%s %s (%s): %s, version %s, %d tokens, %.1fs, %s",
        result["kind"],
        what,
        result["trigger"],
        result["status"],
        result["version"] or "-",
        result["tokens"],
        result["duration_s"],
        result["reason"] or "-",
    )


async def _publish_growth(settings: Settings, agent_id: str, result: dict[str, Any]) -> None:
    """Announce a new version on MQTT; the version is written whether or not this succeeds."""
    payload = {key: result[key] for key in ("agent", "day", "trigger", "version", "tokens")}
    payload["at"] = datetime.now(UTC).isoformat()
    try:
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            async with aiomqtt.Client(**mqtt_client_args(publisher_url(settings))) as client:
                await client.publish(growth_topic(agent_id), json.dumps(payload), qos=1)
    except Exception as exc:  # any failure: the job itself has succeeded
        logger.warning("growth event for %s not published: %r", agent_id, exc)
