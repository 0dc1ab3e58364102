"""GET /metrics: what the daemons and workers count in Redis, rendered in Prometheus' text
format; recording never fails a message."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from orchestrator.adapters.metrics import MessageSample, MetricsRecorder, ReplySample
from orchestrator.background.jobs import prune_job
from orchestrator.caps.ledger import CapLedger, Spent
from orchestrator.caps.limits import CapLimits
from orchestrator.client import ArenaClient
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.wire import inbox_stream
from orchestrator.web import metrics as web_metrics
from tests.arena_helpers import make_pipeline, make_settings, running_daemon
from tests.fakes import FakeMessagesServer, anthropic_provider, dead_base_url
from tests.waiting import block_until, wait_until
from tests.web_helpers import console_server, console_settings

MARKER = '<!--SAVE_MEMORY:{"type": "fact", "content": "the deploy window is Friday 16:00"}-->'

_REPLIED = 'arena_replies_total{agent="pong",kind="reply"} 1.0'

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
async def redis_client(embedded_redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(embedded_redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def scrape(redis_client: Redis) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on an app serving the metrics router from the test's Redis."""
    app = FastAPI()
    app.include_router(web_metrics.router)
    app.dependency_overrides[web_metrics.get_metrics_source] = lambda: redis_client
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        yield client


async def _samples(client: httpx.AsyncClient) -> Samples:
    """Every sample of ``GET /metrics``, by name and sorted labels (the text must parse)."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def _reply(message_id: str) -> ChatMessage:
    return ChatMessage(
        id=message_id,
        group="ops",
        sender="alex",
        kind=MessageKind.HUMAN,
        text="@ping status?",
        created_at=datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
    )


async def test_daemon_counts_what_it_handles(
    tmp_path: Path,
    embedded_redis_url: str,
    embedded_mqtt_url: str,
    redis_client: Redis,
    scrape: httpx.AsyncClient,
):
    """Replies, tokens, latency, memory writes, recall hits, failures and dead letters move as
    messages are handled, and the console renders them in the text format."""
    with FakeMessagesServer() as fake:
        settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake.base_url)
        async with running_daemon(settings):
            client = ArenaClient(embedded_redis_url)
            post = client.post_and_wait
            fake.script(reply=f"noted {MARKER}", times=2)
            await asyncio.to_thread(post, "ops", "@ping remember the window", "alex", 20)
            await asyncio.to_thread(post, "ops", "@ping and again", "alex", 20)
            await asyncio.to_thread(post, "ops", "@ping when is the deploy window?", "alex", 20)
            fake.script(status=529)  # pong's model fails (no retries in these settings)
            _, replies = await asyncio.to_thread(post, "ops", "@pong status?", "alex", 20)
            assert [r.type for r in replies] == ["notice"]
            await redis_client.xadd(inbox_stream(), {"group": "Not A Group!", "text": "hi"})

            invalid = ("arena_dead_letters_total", (("reason", "invalid"),))

            async def counted() -> bool:
                return invalid in await _samples(scrape)

            await wait_until(counted, timeout_s=10, what="the daemon to count the rejected entry")
            client.close()
    found = await _samples(scrape)
    assert found["arena_messages_handled_total", ()] == 4
    assert found["arena_messages_failed_total", (("reason", "model"),)] == 1
    assert found["arena_dead_letters_total", (("reason", "model"),)] == 1
    assert found["arena_dead_letters_total", (("reason", "invalid"),)] == 1
    assert found["arena_message_handling_seconds_count", ()] == 4
    assert found["arena_replies_total", (("agent", "ping"), ("kind", "reply"))] == 3
    assert found["arena_replies_total", (("agent", "pong"), ("kind", "notice"))] == 1
    ping_in = (("agent", "ping"), ("kind", "input"), ("model", "claude-test"))
    ping_out = (("agent", "ping"), ("kind", "output"), ("model", "claude-test"))
    assert found["arena_tokens_total", ping_in] > 0
    assert found["arena_tokens_total", ping_out] > 0
    assert found["arena_model_latency_seconds_count", (("model", "claude-test"),)] == 3
    assert (
        found["arena_model_latency_seconds_bucket", (("le", "+Inf"), ("model", "claude-test"))] == 3
    )
    assert found["arena_memory_writes_total", (("agent", "ping"), ("outcome", "saved"))] == 1
    assert found["arena_memory_writes_total", (("agent", "ping"), ("outcome", "reinforced"))] == 1
    assert found["arena_recall_hits_total", (("agent", "ping"),)] == 1  # the saved fact
    assert found["arena_sse_clients", ()] == 0


async def test_before_anything_is_handled_the_totals_read_zero(scrape: httpx.AsyncClient):
    """The series without labels are there from the start, at zero (a rate needs a start)."""
    found = await _samples(scrape)
    assert found["arena_messages_handled_total", ()] == 0
    assert found["arena_message_handling_seconds_count", ()] == 0
    assert found["arena_message_handling_seconds_bucket", (("le", "+Inf"),)] == 0
    assert not [name for name, _ in found if name.startswith("arena_replies")]


async def test_labels_are_escaped_and_sse_clients_counted(
    redis_client: Redis, scrape: httpx.AsyncClient
):
    """Quotes, backslashes and line feeds in a label come back as they were; the gauge follows
    the event-stream clients."""
    model = 'we"ird\\model\nname'
    recorder = MetricsRecorder(redis_client)
    reply = ReplySample(agent="ping", kind="reply", model=model, latency_s=0.3, tokens_in=5)
    await recorder.message_handled(MessageSample(duration_s=0.02, replies=(reply,)))
    await recorder.message_handled(MessageSample(duration_s=7.0))
    await recorder.aclose()
    with web_metrics.sse_clients.watching(), web_metrics.sse_clients.watching():
        found = await _samples(scrape)
    assert found["arena_sse_clients", ()] == 2
    assert found["arena_model_latency_seconds_bucket", (("le", "0.25"), ("model", model))] == 0
    assert found["arena_model_latency_seconds_bucket", (("le", "0.5"), ("model", model))] == 1
    assert found["arena_model_latency_seconds_sum", (("model", model),)] == pytest.approx(0.3)
    tokens = (("agent", "ping"), ("kind", "input"), ("model", model))
    assert found["arena_tokens_total", tokens] == 5
    assert found["arena_message_handling_seconds_bucket", (("le", "0.025"),)] == 1
    assert found["arena_message_handling_seconds_bucket", (("le", "5.0"),)] == 1
    assert found["arena_message_handling_seconds_bucket", (("le", "10.0"),)] == 2
    assert found["arena_message_handling_seconds_sum", ()] == pytest.approx(7.02)
    assert (await _samples(scrape))["arena_sse_clients", ()] == 0


async def test_redis_outage_does_not_fail_messages(
    tmp_path: Path, settings, store, fake_llm, caplog
):
    """With Redis unreachable the messages are answered; one WARNING says the metrics are not
    recorded, not one per attempt to write them."""
    dead = Redis.from_url(dead_base_url().replace("http", "redis"))
    recorder = MetricsRecorder(dead, interval_s=60)
    llm = anthropic_provider(api_key="test", base_url=fake_llm.base_url, max_retries=0)
    pipeline, outbox, _ = make_pipeline(settings, store, llm, metrics=recorder)
    with caplog.at_level(logging.WARNING, logger="orchestrator.adapters.metrics"):
        assert await pipeline.handle(_reply("1000-0")) == 1
        await recorder.flush()
        assert await pipeline.handle(_reply("1001-0")) == 1
        await recorder.aclose()
    await llm.aclose()
    await dead.aclose()
    assert [i.type for i in outbox.items] == ["reply", "done", "reply", "done"]
    warnings = [r for r in caplog.records if r.name == "orchestrator.adapters.metrics"]
    assert len(warnings) == 1
    assert "metrics not recorded" in warnings[0].getMessage()


async def test_a_message_handled_again_is_counted_once(
    settings, store, fake_llm, redis_client: Redis, scrape: httpx.AsyncClient
):
    """Handling a message again (a redelivery) publishes nothing new and counts nothing new."""
    llm = anthropic_provider(api_key="test", base_url=fake_llm.base_url, max_retries=0)
    recorder = MetricsRecorder(redis_client)
    pipeline, _, _ = make_pipeline(settings, store, llm, metrics=recorder)
    assert await pipeline.handle(_reply("1000-0")) == 1
    assert await pipeline.handle(_reply("1000-0")) == 1
    await llm.aclose()
    await recorder.aclose()
    found = await _samples(scrape)
    assert found["arena_messages_handled_total", ()] == 1
    assert found["arena_replies_total", (("agent", "ping"), ("kind", "reply"))] == 1


async def test_recording_resumes_after_redis_pauses(redis_client: Redis, caplog):
    """A Redis that stops answering for a moment costs the numbers of that moment: one
    WARNING, then one INFO line when it answers again, and later numbers are counted."""
    recorder = MetricsRecorder(redis_client, interval_s=60, timeout_s=0.2)
    await redis_client.execute_command("CLIENT", "PAUSE", "30000", "WRITE")
    with caplog.at_level(logging.INFO, logger="orchestrator.adapters.metrics"):
        try:
            await recorder.message_handled(MessageSample(duration_s=0.1))
            await recorder.flush()
        finally:
            await redis_client.execute_command("CLIENT", "UNPAUSE")  # the moment is over
        await recorder.message_handled(MessageSample(duration_s=0.1))
        await recorder.aclose()
    # The recorder's own lines: redis-py may log at DEBUG on the way (a reconnection).
    levels = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "orchestrator.adapters.metrics"
    ]
    assert [level for level, _ in levels] == ["WARNING", "INFO"], levels
    assert await redis_client.hget("arena:metrics:arena_messages_handled", "[]") is not None


async def test_job_outcomes_are_counted(
    settings_env, embedded_redis_url, monkeypatch, scrape: httpx.AsyncClient
):
    """A background job's outcome is counted by kind and status; one that raised as an error."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    result = await asyncio.to_thread(prune_job, date(2026, 6, 1).isoformat(), "daily")
    assert result["kind"] == "prune"
    found = await _samples(scrape)
    assert found["arena_jobs_total", (("kind", "prune"), ("status", "done"))] == 1
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{settings_env.data_dir}/missing/dir/arena.db")
    with pytest.raises(Exception):  # noqa: B017, PT011  (whatever fails, RQ retries it)
        await asyncio.to_thread(prune_job, date(2026, 6, 2).isoformat(), "daily")
    found = await _samples(scrape)
    assert found["arena_jobs_total", (("kind", "prune"), ("status", "error"))] == 1


async def test_unreadable_redis_is_one_line(tmp_path: Path):
    """When Redis cannot be read, /metrics answers 503 with one line."""
    app = FastAPI()
    app.include_router(web_metrics.router)
    dead = Redis.from_url(dead_base_url().replace("http", "redis"))
    app.dependency_overrides[web_metrics.get_metrics_source] = lambda: dead
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        response = await client.get("/metrics")
    await dead.aclose()
    assert response.status_code == 503
    assert response.json()["error"].startswith("metrics unavailable: redis cannot be read")


def test_console_serves_the_daemon_counts_behind_its_token(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """The console (a real server, a daemon beside it) needs its token for /metrics; with it,
    a message posted through the API shows in the counts."""
    settings = console_settings(
        tmp_path, embedded_redis_url, mqtt_url=embedded_mqtt_url, web_token="s3cret-token"
    )
    bearer = {"Authorization": "Bearer s3cret-token"}
    with console_server(settings, with_daemon=True) as base:
        assert httpx.get(f"{base}/metrics", timeout=5).status_code == 401
        posted = httpx.post(
            f"{base}/api/groups/ops/messages", json={"text": "@pong hi"}, headers=bearer
        )
        assert posted.status_code == 202, posted.text
        block_until(
            lambda: _REPLIED in httpx.get(f"{base}/metrics", headers=bearer, timeout=5).text,
            timeout_s=20,
            what="pong's reply to be counted",
        )
        response = httpx.get(f"{base}/metrics", headers=bearer, timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name for f in text_string_to_metric_families(response.text)}
    assert {
        "arena_messages_handled",
        "arena_model_latency_seconds",
        "arena_sse_clients",
    } <= families
    assert _REPLIED in response.text


async def test_todays_spending_and_its_caps_are_gauges(redis_client: Redis):
    """Spending counted as the daemon counts it shows as arena_spend_today per agent, group,
    model and all, beside arena_spend_cap where a cap is set (the numbers of arena budget)."""
    ledger = CapLedger(redis_client, UTC)
    spent = Spent(agent="architect", group="ops", model="m1", tokens=1500, micro_usd=250_000)
    await ledger.settle(ledger.unchecked(datetime.now(UTC)), spent)
    app = FastAPI()
    app.include_router(web_metrics.router)
    app.dependency_overrides[web_metrics.get_metrics_source] = lambda: redis_client
    source = web_metrics.SpendSource(
        ledger=ledger, limits=CapLimits(group_tokens=2000, all_usd=5.0), zone=UTC
    )
    app.dependency_overrides[web_metrics.get_spend_source] = lambda: source
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        samples = await _samples(client)

    def gauge(name: str, scope: str, who: str, unit: str) -> float | None:
        labels = (("name", who), ("scope", scope), ("unit", unit))
        return samples.get((name, labels))

    assert gauge("arena_spend_today", "group", "ops", "tokens") == 1500
    assert gauge("arena_spend_today", "agent", "architect", "usd") == 0.25
    assert gauge("arena_spend_today", "model", "m1", "tokens") == 1500
    assert gauge("arena_spend_cap", "group", "ops", "tokens") == 2000
    assert gauge("arena_spend_cap", "all", "*", "usd") == 5.0
    assert gauge("arena_spend_cap", "agent", "architect", "tokens") is None
