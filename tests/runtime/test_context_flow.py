"""The context builder in use: prompt caching, drift correction, big histories, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.context.build import build_context
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.core.wire import daemon_key
from orchestrator.errors import ConfigError
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.runtime import daemon
from orchestrator.runtime.briefing import load_drift
from orchestrator.runtime.wiring import Wiring
from tests.arena_helpers import REPO, make_settings, running_daemon, set_environment
from tests.fakes import FakeMessagesServer
from tests.history_seed import write_history

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


async def test_prompt_cache_breakpoint_and_cost_report(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """The stable prefix carries cache_control, the per-turn tail does not; the reply keeps a
    cost report (layers, decisions, usage with cache figures) shown by `arena history --json`."""
    with FakeMessagesServer() as fake:
        settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake.base_url)
        (settings.workspaces_dir / "ping").mkdir(parents=True)
        (settings.workspaces_dir / "ping" / "CLAUDE.md").write_text("PING-ROLE: plays first.")
        async with running_daemon(settings):
            client = ArenaClient(embedded_redis_url)
            for text in ("@ping first question", "@ping second question"):
                await asyncio.to_thread(client.post_and_wait, "cache", text, "alex", 20)
            client.close()
        system = fake.requests[0]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert "You are Ping" in system[0]["text"]
    assert "PING-ROLE" in system[0]["text"]
    assert "cache_control" not in system[1]
    assert system[1]["text"].startswith("Now:")
    monkeypatch.setenv("ARENA_DATA_DIR", str(settings.data_dir))
    history = CliRunner().invoke(main, ["history", "cache", "--json"])
    rows = [json.loads(line) for line in history.output.splitlines()]
    replies = [r for r in rows if r["kind"] == "agent"]
    report = replies[1]["meta"]["context"]
    assert report["window"] == 200_000
    assert report["tokens"]["identity"] > 0
    assert report["tokens"]["total"] > report["tokens"]["history"] > 0
    assert replies[0]["meta"]["usage"]["cache_creation_tokens"] > 0
    assert replies[1]["meta"]["usage"]["cache_read_tokens"] > 0


async def test_drift_correction_moves_towards_reported_usage(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """When the provider counts three times our estimate, the model's factor rises and is
    kept for the next run."""
    with FakeMessagesServer() as fake:
        fake.script(
            usage={
                "input_tokens": 30_000,
                "output_tokens": 5,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
        )
        settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake.base_url)
        async with running_daemon(settings):
            client = ArenaClient(embedded_redis_url)
            await asyncio.to_thread(client.post_and_wait, "drift", "@ping hello", "alex", 20)
            client.close()
    factor = load_drift(settings).factor("claude-test")
    assert 1.0 < factor <= 1.6


async def test_the_offline_model_teaches_no_drift_factor(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """Without a key the offline model answers and counts words, not tokens: nothing is learnt."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        _, replies = await asyncio.to_thread(
            client.post_and_wait, "drift", "@ping hello", "alex", 20
        )
        client.close()
    assert [r.text.split(" ", 1)[0] for r in replies if r.kind == "agent"] == ["[offline]"]
    assert load_drift(settings).snapshot() == {}


async def test_a_daemon_refused_its_name_leaves_the_learnt_factors_alone(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """A daemon that stops at once (its consumer name is held by a live process) does not
    write back the factors it read: a live daemon may have learnt newer ones since. Nor does it
    open an MQTT connection (one cancelled while it opens would outlive the event loop)."""
    broker = socket.create_server(("127.0.0.1", 0))  # would accept a connection, never answer
    broker.setblocking(False)
    mqtt_url = f"mqtt://127.0.0.1:{broker.getsockname()[1]}"
    settings = make_settings(tmp_path, embedded_redis_url, mqtt_url, None)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    drift = settings.data_dir / "drift.json"
    drift.write_text('{"claude-test": 1.25}\n', encoding="utf-8")
    before = drift.stat()
    holder = f"{socket.gethostname()} {os.getppid()}"  # a live process on this machine
    with redis.Redis.from_url(embedded_redis_url) as client:
        client.set(daemon_key(settings.consumer), holder, px=60_000)
    with pytest.raises(ConfigError, match="ARENA_CONSUMER"):
        await daemon.run(settings, asyncio.Event())
    after = drift.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert load_drift(settings).factor("claude-test") == 1.25
    with broker, pytest.raises(BlockingIOError):
        broker.accept()  # nobody connected


def test_ten_thousand_messages_are_not_recounted(tmp_path: Path):
    """A 10,000-message group's context is built from stored counts, tokenising only a few
    texts, and fits the window."""
    settings = make_settings(
        tmp_path, "redis://127.0.0.1:1", "mqtt://127.0.0.1:1", None, context_window=8_000
    )
    engine = make_engine(settings.effective_database_url)
    store = HistoryStore(engine)
    counter = TokenCounter()
    with engine.begin() as conn:
        from orchestrator.memory.conversation.store import MessageRow

        conn.execute(
            MessageRow.__table__.insert(),  # type: ignore[attr-defined]
            [
                {
                    "id": f"{n}-0",
                    "group_id": "big",
                    "sender": "alex",
                    "kind": "human",
                    "text": f"message number {n} about the project",
                    "hop": 0,
                    "created_at": T0 + timedelta(seconds=n),
                    "status": "done",
                    "tokens": 8,
                }
                for n in range(10_000)
            ],
        )
    wiring = Wiring(settings, engine)
    wiring.counter = counter
    team = wiring.team
    briefing = wiring.briefing()
    trigger = store.recent("big", 1)[0].message
    gathered = briefing.gather(team.get("ping"), trigger, T0)
    before = counter.calls
    built = build_context(
        agent=team.get("ping"),
        agents=team.agents,
        layers=gathered.layers,
        trigger=trigger,
        prompts=Prompts(REPO / "prompts"),
        now=T0,
        limits=wiring.tuning.limits(team.get("ping")),
        transcript=wiring.transcript,
    )
    engine.dispose()
    assert counter.calls - before < 20
    assert built.report.tokens.total <= built.report.available
    assert len(built.plan.history) > 100


def test_arena_context_on_empty_and_live_data(tmp_path: Path, embedded_redis_url: str, monkeypatch):
    """`arena context` works with no data at all, and shows stored history once there is."""
    settings = make_settings(tmp_path, embedded_redis_url, "mqtt://127.0.0.1:1", None)
    set_environment(monkeypatch, settings)
    empty = CliRunner().invoke(main, ["context", "ping", "quiet"])
    assert empty.exit_code == 0, empty.output
    assert "history" in empty.output
    assert "available" in empty.output
    engine = make_engine(settings.effective_database_url)
    write_history(
        engine,
        ChatMessage(
            id="5-0",
            group="quiet",
            sender="alex",
            kind=MessageKind.HUMAN,
            text="LIVE-MESSAGE here",
            created_at=T0,
        ),
        tokens=5,
    )
    engine.dispose()
    live = CliRunner().invoke(main, ["context", "ping", "quiet", "--json"])
    assert live.exit_code == 0, live.output
    data = json.loads(live.output)
    assert "LIVE-MESSAGE" in data["messages"][-1]["content"]
    assert data["report"]["tokens"]["history"] > 0
    unknown = CliRunner().invoke(main, ["context", "nobody", "quiet"])
    assert unknown.exit_code == 1
    assert "no agent 'nobody'" in unknown.output
