"""The daemon end to end, on real Redis and MQTT servers and the real Anthropic SDK."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import aiomqtt
import redis
from click.testing import CliRunner

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.wire import deadletter_stream, group_topic, inbox_stream
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from tests.arena_helpers import (
    agent_of,
    environment,
    group_of,
    make_settings,
    outbox,
    outboxes,
    running_daemon,
)
from tests.waiting import wait_until


def _history(settings, group: str):
    engine = make_engine(settings.effective_database_url)
    try:
        return HistoryStore(engine).recent(group, 100)
    finally:
        engine.dispose()


async def test_reply_reaches_stream_mqtt_and_database(
    tmp_path: Path, redis_url: str, mqtt_broker: str, fake_llm, caplog
):
    """A posted message is answered: reply on the outbound stream, on MQTT, in SQL, logged."""
    fake_llm.reply_fn = lambda request: f"hello from {agent_of(request)}"
    settings = make_settings(tmp_path, redis_url, mqtt_broker, fake_llm.base_url)
    caplog.set_level(logging.INFO, logger="orchestrator.runtime.pipeline")
    received: list[dict] = []
    async with (
        aiomqtt.Client(**mqtt_client_args(mqtt_broker)) as mqtt,
        running_daemon(settings),
    ):
        await mqtt.subscribe(group_topic("demo"), qos=1)
        client = ArenaClient(redis_url)
        message_id, replies = await asyncio.to_thread(
            client.post_and_wait, "demo", "@ping let us start", "alex", 20
        )
        client.close()
        async with asyncio.timeout(10):
            async for event in mqtt.messages:
                received.append(json.loads(event.payload))  # type: ignore[arg-type]
                if received[-1]["type"] == "done":
                    break
    assert [(r.sender, r.text, r.type) for r in replies] == [("ping", "hello from ping", "reply")]
    items = outbox(redis_url, "demo")
    assert [i["type"] for i in items] == ["reply", "done"]
    assert items[0]["in_reply_to"] == message_id
    assert [e["type"] for e in received] == ["reply", "done"]
    assert received[0]["text"] == "hello from ping"
    assert received[0]["in_reply_to"] == message_id
    stored = _history(settings, "demo")
    assert [(s.message.sender, s.message.kind.value) for s in stored] == [
        ("alex", "human"),
        ("ping", "agent"),
    ]
    assert stored[0].status == "done"
    assert stored[0].route is not None
    assert stored[0].route["reason"] == "mention"
    assert stored[1].meta["usage"]["output_tokens"] > 0
    assert any(
        f"message {message_id} group=demo" in r.getMessage() and "replies=1" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO
    )


async def test_rule_routing_and_cjk_length_rule(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, fake_llm
):
    """Keyword rules route in English; a character-length rule routes short Chinese text."""
    fake_llm.reply_fn = lambda request: f"{agent_of(request)} here"
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake_llm.base_url)
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        _, by_keyword = await asyncio.to_thread(
            client.post_and_wait, "rules", "shall we play a GAME now", "alex", 20
        )
        # Ten Chinese characters: 30 bytes of UTF-8, but within max_length 12.
        _, by_length = await asyncio.to_thread(
            client.post_and_wait, "rules", "我们今天讨论一下设计", "alex", 20
        )
        _, by_default = await asyncio.to_thread(
            client.post_and_wait, "rules", "hello, anyone around?", "alex", 20
        )
        client.close()
    assert [r.sender for r in by_keyword] == ["ping"]
    assert [r.sender for r in by_length] == ["pong"]
    assert [r.sender for r in by_default] == ["helper"]
    routes = [
        s.route
        for s in _history(
            make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None), "rules"
        )
        if s.route
    ]
    assert [r["reason"] for r in routes] == ["rule", "rule", "default"]


async def test_handoff_stops_at_hop_limit(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, fake_llm
):
    """Agents that keep mentioning each other stop after ``hop_limit`` replies, and a notice
    says which agent was not asked."""

    def volley(request: dict) -> str:
        me = agent_of(request)
        return "@pong your turn" if me == "ping" else "@ping back to you, and @pong is me"

    fake_llm.reply_fn = volley
    settings = make_settings(
        tmp_path, embedded_redis_url, embedded_mqtt_url, fake_llm.base_url, hop_limit=3
    )
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        message_id, replies = await asyncio.to_thread(
            client.post_and_wait, "volley", "@ping start the game", "alex", 20
        )
        client.close()
    assert [(r.sender, r.hop) for r in replies] == [
        ("ping", 1),
        ("pong", 2),
        ("ping", 3),
        ("arena", 4),
    ]
    assert replies[-1].text == "hop limit (3) reached: @pong was not asked to answer"
    assert len(fake_llm.requests) == 3
    stored = _history(settings, "volley")
    assert stored[0].meta["hop_limit_reached"] == ["pong"]
    assert all(s.message.in_reply_to == message_id for s in stored[1:])


async def test_bad_input_is_dead_lettered_and_daemon_carries_on(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, fake_llm
):
    """Entries posted raw with bad fields go to the dead-letter stream with a reason."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake_llm.base_url)
    raw = redis.Redis.from_url(embedded_redis_url)
    bad_entries = [
        {"group": "demo"},  # no text
        {"group": "../etc", "text": "hi"},
        {"group": "demo", "text": "   "},
        {"group": "demo", "text": b"\xff\xfe not utf-8"},
        {"group": "demo", "text": "x" * (settings.max_message_bytes + 1)},
        {"group": "demo", "text": "null \x00 byte"},
    ]
    ids = [raw.xadd(inbox_stream(), fields).decode() for fields in bad_entries]  # type: ignore[arg-type]
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        _, replies = await asyncio.to_thread(
            client.post_and_wait, "demo", "still there?", "alex", 20
        )
        client.close()
    dead = raw.xrange(deadletter_stream())
    raw.close()
    # Each is dead-lettered under its own id; groups (partitions) are not ordered between them.
    by_id = {f[b"entry_id"].decode(): f[b"reason"].decode() for _id, f in dead}
    assert sorted(by_id) == sorted(ids)
    reasons = [by_id[i] for i in ids]
    assert reasons[0].startswith("text: missing field")
    assert reasons[1].startswith("group:")
    assert "empty" in reasons[2]
    assert "UTF-8" in reasons[3]
    assert "limit" in reasons[4]
    assert "control character" in reasons[5]
    assert len(replies) == 1


async def test_two_groups_run_concurrently_each_in_order(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, fake_llm
):
    """While one group waits on the model, another group's message is already at the model;
    within each group, replies come in posting order."""
    fake_llm.latency_s = 1.0
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake_llm.base_url)
    client = ArenaClient(embedded_redis_url)
    posted: dict[str, list[str]] = {"alpha": [], "beta": []}
    for n in range(3):
        for group in ("alpha", "beta"):
            posted[group].append(client.post(group, f"@ping message {n} in {group}", "alex"))
    async with running_daemon(settings):
        await wait_until(
            lambda: all(
                sum(1 for i in items if i["type"] == "done") == 3
                for items in outboxes(embedded_redis_url, list(posted)).values()
            ),
            timeout_s=30,
            what="three answers in each group",
        )
    client.close()
    first_two = {group_of(r) for r in fake_llm.requests[:2]}
    assert first_two == {"alpha", "beta"}
    for group, ids in posted.items():
        replies = [i for i in outbox(embedded_redis_url, group) if i["type"] == "reply"]
        assert [r["in_reply_to"] for r in replies] == ids
        texts = [r["messages"][-1]["content"] for r in fake_llm.requests if group_of(r) == group]
        assert [f"message {n} in {group}" in t for n, t in enumerate(texts)] == [True] * 3


async def test_postgres_database_works_the_same(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, fake_llm, postgres_url: str
):
    """With DATABASE_URL on PostgreSQL, messages and replies are stored there."""
    settings = make_settings(
        tmp_path,
        embedded_redis_url,
        embedded_mqtt_url,
        fake_llm.base_url,
        database_url=postgres_url,
    )
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        message_id, replies = await asyncio.to_thread(
            client.post_and_wait, "pg-group", "@pong over here", "alex", 20
        )
        client.close()
    stored = _history(settings, "pg-group")
    assert [s.message.id for s in stored] == [message_id, replies[0].id]


async def test_more_groups_in_flight_than_redis_connections(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, fake_llm, caplog
):
    """Forty groups at the model at once and four Redis connections: commands wait for a
    connection, none fails, every message is answered once, in order."""
    fake_llm.latency_s = 0.3
    settings = make_settings(
        tmp_path,
        embedded_redis_url,
        embedded_mqtt_url,
        fake_llm.base_url,
        redis_max_connections=4,
    )
    client = ArenaClient(embedded_redis_url)
    groups = [f"crowd-{n}" for n in range(40)]
    posted = {g: [client.post(g, f"@ping round {r}", "alex") for r in range(2)] for g in groups}
    async with running_daemon(settings):
        await wait_until(
            lambda: (
                sum(
                    1
                    for items in outboxes(embedded_redis_url, groups).values()
                    for i in items
                    if i["type"] == "done"
                )
                == 80
            ),
            timeout_s=60,
            what="80 answers",
        )
    client.close()
    for group, items in outboxes(embedded_redis_url, groups).items():
        assert [i["in_reply_to"] for i in items if i["type"] == "reply"] == posted[group]
    assert not [r for r in caplog.records if "interrupted" in r.getMessage()]


async def test_daemon_creates_a_data_folder_that_does_not_exist(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """The daemon on an ARENA_DATA_DIR that does not exist yet creates it and answers."""
    fresh = tmp_path / "not" / "yet" / "data"
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None, data_dir=fresh)
    assert not fresh.exists()
    async with running_daemon(settings):
        with ArenaClient(embedded_redis_url) as client:
            _, replies = await asyncio.to_thread(client.post_and_wait, "fresh", "hi", "alex", 60)
    assert [r.type for r in replies] == ["reply"]
    assert (fresh / "arena.db").is_file()


def test_daemon_says_why_it_cannot_make_the_data_folder(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """`arena daemon` on a data folder under a plain file: one line naming ARENA_DATA_DIR and
    the reason, exit code 1 (it stops before it starts anything, so it runs in this process)."""
    (tmp_path / "afile").write_text("not a folder")
    bad = tmp_path / "afile" / "data"
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None, data_dir=bad)
    result = CliRunner().invoke(main, ["daemon"], env=environment(settings))
    assert result.exit_code == 1, result.output
    line = f"arena: ARENA_DATA_DIR: cannot create {bad}: Not a directory"
    assert line in result.stderr.splitlines()
    assert "Traceback" not in result.output
