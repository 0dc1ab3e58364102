"""Rolling summaries started by the daemon: every N messages, and at once on a decision."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import redis
from rq import SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_client import connect, connect_async
from orchestrator.adapters.summary_counts import SummaryCounts
from orchestrator.background.listing import list_jobs
from orchestrator.background.queue import (
    enqueue_summary,
    fetch_job,
    queue,
    summary_job_id,
    summary_job_key,
)
from orchestrator.background.queue_now import SummaryEnqueuer
from orchestrator.client import ArenaClient
from orchestrator.core.wire import summary_counter_key
from orchestrator.memory.summaries import summary_path
from orchestrator.runtime.triggers import SummaryTrigger
from tests.arena_helpers import make_settings, running_daemon


def _export(settings, monkeypatch) -> None:
    # Job functions read their settings from the environment, as `arena worker` does.
    for name, value in {
        "REDIS_URL": settings.redis_url,
        "MQTT_URL": settings.mqtt_url,
        "ARENA_DATA_DIR": str(settings.data_dir),
        "ARENA_AGENTS_DIR": str(settings.agents_dir),
        "ARENA_WORKSPACES_DIR": str(settings.workspaces_dir),
        "ARENA_PROMPTS_DIR": str(settings.prompts_dir),
        "ARENA_SUMMARY_EVERY_MESSAGES": str(settings.summary_every_messages),
    }.items():
        monkeypatch.setenv(name, value)


def _work(url: str) -> None:
    connection = redis.Redis.from_url(url)
    worker = SimpleWorker([queue(connection)], connection=connection, serializer=JSONSerializer)
    worker.work(burst=True, logging_level="ERROR")
    connection.close()


async def test_twenty_messages_produce_a_summary_version(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """Ten questions and their ten replies make twenty messages: the summary job is enqueued,
    and a worker writes the group's first summary."""
    settings = make_settings(
        tmp_path, embedded_redis_url, embedded_mqtt_url, None, summary_every_messages=20
    )
    _export(settings, monkeypatch)
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        for n in range(10):
            await asyncio.to_thread(
                client.post_and_wait, "team", f"@ping question number {n}", "alex", 20
            )
            if n == 8:
                connection = redis.Redis.from_url(embedded_redis_url)
                assert [j for j in list_jobs(connection) if j.kind == "summary"] == []
                connection.close()
        client.close()


def test_a_decision_tag_summarises_at_once(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """A message carrying [decision] enqueues the summary without waiting for N messages,
    and the summary a worker writes has the decision in it."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    _export(settings, monkeypatch)

    async def decide() -> None:
        async with running_daemon(settings):
            client = ArenaClient(embedded_redis_url)
            await asyncio.to_thread(
                client.post_and_wait,
                "ship",
                "[decision] @ping we decided to ship on Friday",
                "alex",
                20,
            )
            client.close()

    asyncio.run(decide())
    connection = redis.Redis.from_url(embedded_redis_url)
    jobs = [j for j in list_jobs(connection) if j.kind == "summary"]
    connection.close()
    assert [(j.target, j.trigger) for j in jobs] == [("ship", "decision")]
    _work(embedded_redis_url)  # RQ workers handle signals: the main thread, no event loop
    assert "Friday" in summary_path(settings.data_dir, "ship").read_text()


def test_a_summary_due_while_its_job_waits_is_not_enqueued_again(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch, caplog
):
    """Due again while its job is queued: the job is left as it is (it reads the group's
    messages when it runs), the count starts again; once the job has run, the next one that
    is due is enqueued anew."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    _export(settings, monkeypatch)
    caplog.set_level(logging.INFO, logger="orchestrator.runtime.triggers")
    connection = redis.Redis.from_url(embedded_redis_url)

    def due(text: str) -> str | None:
        async def run() -> str | None:
            counts = SummaryCounts(connect_async(embedded_redis_url))
            trigger = SummaryTrigger(counts, connect(embedded_redis_url), settings)
            try:
                return await trigger.after_message("ship", 1, [text], [])
            finally:
                trigger.close()
                await counts.redis.aclose()

        return asyncio.run(run())

    def summaries() -> list[tuple[str, str]]:
        return [(j.status, j.trigger) for j in list_jobs(connection) if j.kind == "summary"]

    try:
        assert due("[decision] we ship on Friday") == "decision"
        queued = Job.fetch(summary_job_id("ship", None), connection=connection)
        assert summaries() == [("queued", "decision")]
        assert due("[task_assigned] @ping writes the notes") == "task"
        assert summaries() == [("queued", "decision")]  # the same job, untouched
        again = Job.fetch(summary_job_id("ship", None), connection=connection)
        assert again.enqueued_at == queued.enqueued_at
        assert "summary due (task): already queued" in caplog.text
        assert connection.get(summary_counter_key("ship")) == b"0"
        _work(embedded_redis_url)
        assert [status for status, _ in summaries()] == ["finished"]
        assert due("[requirement] it must run offline") == "requirement"
        assert summaries() == [("queued", "requirement")]
    finally:
        connection.close()


def test_a_summary_enqueued_on_the_loop_is_the_job_rq_would_enqueue(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """The job stored in one round trip from the event loop has what RQ's own enqueue stores
    (field by field, bar its group and times), sits on the queue behind it, is refused when
    its id is taken (the job left as it was), and a worker runs it. The group's count starts
    again in the same round trip; a server that forgot the script (restarted, flushed) is
    given it again."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    _export(settings, monkeypatch)
    connection = redis.Redis.from_url(embedded_redis_url)

    async def on_loop(group: str) -> bool:
        client = connect_async(embedded_redis_url)
        try:
            return await SummaryEnqueuer(client, connection, settings).enqueue(group, "decision")
        finally:
            await client.aclose()

    def stored(group: str) -> dict[bytes, bytes]:
        fields = connection.hgetall(Job.key_for(summary_job_id(group, None)))
        for changing in (b"created_at", b"enqueued_at", b"data", b"meta", b"description"):
            assert fields.pop(changing)
        return fields

    try:
        enqueue_summary(connection, "by-rq", None, "decision", settings=settings)
        connection.set(summary_counter_key("on-loop"), 20)
        connection.script_flush()
        assert asyncio.run(on_loop("on-loop")) is True
        assert connection.get(summary_counter_key("on-loop")) == b"0"
        assert stored("on-loop") == stored("by-rq")
        ours = fetch_job(connection, summary_job_id("on-loop", None))
        theirs = fetch_job(connection, summary_job_id("by-rq", None))
        assert ours is not None
        assert theirs is not None
        assert ours.func_name == theirs.func_name
        assert ours.args == ["on-loop", None, "decision"]
        assert ours.meta == theirs.meta | {"target": "on-loop"}
        assert ours.description == "summary on-loop (decision)"
        assert queue(connection).job_ids == [theirs.id, ours.id]
        assert queue(connection) in queue(connection).all(connection=connection)

        assert asyncio.run(on_loop("on-loop")) is False  # taken: left to RQ's enqueue
        assert queue(connection).job_ids == [theirs.id, ours.id]
        again = fetch_job(connection, ours.id)
        assert again is not None
        assert again.enqueued_at == ours.enqueued_at

        _work(embedded_redis_url)
        finished = fetch_job(connection, ours.id)
        assert finished is not None
        assert finished.get_status() == "finished"
    finally:
        connection.close()


def test_a_summary_job_s_status_read_with_its_count_reset_when_it_waits(embedded_redis_url: str):
    """One round trip: the job's status, and the group's count started again only when the
    job is there and has not ended (no job, or an ended one: the count is left as it is)."""
    connection = redis.Redis.from_url(embedded_redis_url)
    key = summary_job_key("ship")
    ended = ("finished", "failed")

    async def status() -> str | None:
        counts = SummaryCounts(connect_async(embedded_redis_url))
        try:
            return await counts.status_resetting(key, "ship", ended)
        finally:
            await counts.redis.aclose()

    try:
        connection.set(summary_counter_key("ship"), 7)
        assert asyncio.run(status()) is None
        assert connection.get(summary_counter_key("ship")) == b"7"
        connection.hset(key, "status", "finished")
        assert asyncio.run(status()) == "finished"
        assert connection.get(summary_counter_key("ship")) == b"7"
        connection.hset(key, "status", "queued")
        assert asyncio.run(status()) == "queued"
        assert connection.get(summary_counter_key("ship")) == b"0"
    finally:
        connection.delete(key, summary_counter_key("ship"))
        connection.close()


def test_many_groups_counted_in_one_step_each_total_in_order(embedded_redis_url: str):
    """A batch of counts (one group twice, another once, one with a count before) gives each
    its group's total after it, in order, as one INCRBY after another would."""
    connection = redis.Redis.from_url(embedded_redis_url)
    keys = [summary_counter_key(g) for g in ("north", "south")]

    async def add(counts: list[tuple[str, int]]) -> list[int]:
        store = SummaryCounts(connect_async(embedded_redis_url))
        try:
            return await store.add(counts)
        finally:
            await store.redis.aclose()

    try:
        connection.set(keys[1], 5)
        assert asyncio.run(add([("north", 2), ("south", 2), ("north", 3)])) == [2, 7, 5]
        assert asyncio.run(add([])) == []
        assert [connection.get(k) for k in keys] == [b"5", b"7"]
    finally:
        connection.delete(*keys)
        connection.close()
