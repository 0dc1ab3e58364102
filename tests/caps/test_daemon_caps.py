"""Daily caps in the running daemon: the offline model, real Redis and MQTT, `arena budget`."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
import redis
from click.testing import CliRunner

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.wire import (
    PARTITIONS,
    budget_topic,
    deadletter_stream,
    inbox_stream,
    lease_key,
    metrics_key,
    outbox_stream,
)
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.settings import Settings
from tests.arena_helpers import (
    make_settings,
    running_daemon,
    set_environment,
    spawn_daemon,
)
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
MESSAGES = (
    "we decided to use Postgres",
    "@architect what did we decide about the database?",
    "@architect and which cache goes in front of it?",
)


def _settings(tmp_path: Path, redis_url: str, mqtt_url: str, **caps: Any) -> Settings:
    """The shipped team and its identity files (not its memory), offline, with ``caps``."""
    workspaces = tmp_path / "shipped"
    shutil.copytree(
        REPO / "workspaces",
        workspaces,
        ignore=shutil.ignore_patterns("memory", "MEMORY.md", ".growth", ".*.lock"),
        dirs_exist_ok=True,
    )
    return make_settings(
        tmp_path,
        redis_url,
        mqtt_url,
        None,
        agents_dir=REPO / "agents",
        workspaces_dir=workspaces,
        **caps,
    )


def _dead_letters(url: str) -> list[dict[str, str]]:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        return [fields for _id, fields in client.xrange(deadletter_stream())]


async def _post_all(url: str, texts: tuple[str, ...]) -> list[list[Any]]:
    client = ArenaClient(url)
    try:
        answers = []
        for text in texts:
            _, replies = await asyncio.to_thread(client.post_and_wait, "demo", text, "alex", 20)
            answers.append(replies)
        return answers
    finally:
        client.close()


async def test_a_group_over_its_daily_cap_gets_a_notice_and_a_dead_letter(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """With 2,000 tokens a day for the group and the shipped team offline, the third
    message is not answered: the group is told which budget, how much is used and when it
    resets; it is dead-lettered with reason budget; MQTT hears of it; `arena budget` shows
    why."""
    settings = _settings(
        tmp_path, embedded_redis_url, embedded_mqtt_url, cap_group_tokens_per_day=2000
    )
    async with (
        aiomqtt.Client(**mqtt_client_args(embedded_mqtt_url)) as mqtt,
        running_daemon(settings),
    ):
        await mqtt.subscribe(budget_topic(), qos=1)
        answers = await _post_all(embedded_redis_url, MESSAGES)
        async with asyncio.timeout(10):
            event = json.loads((await anext(aiter(mqtt.messages))).payload)
    # The architect's turn searches memory (two model calls) and passes the cap; it finishes,
    # the group is warned, and the next turn is refused.
    assert [[r.type for r in a] for a in answers] == [["reply"], ["reply", "notice"], ["notice"]]
    assert "I searched memory (memory_search)" in answers[1][0].text
    assert "daily budget used up (group demo:" in answers[1][1].text
    notice = answers[2][0]
    assert notice.type == "notice"
    assert "group demo:" in notice.text
    assert "daily budget reached (group demo:" in notice.text
    assert "of 2,000 tokens" in notice.text
    assert "resets" in notice.text
    assert event["scope"] == "group"
    assert event["name"] == "demo"
    assert event["cap"] == 2000
    assert isinstance(event["used"], int)  # tokens are whole numbers on MQTT too
    assert event["state"] in ("warning", "reached")
    letters = _dead_letters(embedded_redis_url)
    assert len(letters) == 1
    assert letters[0]["reason"].startswith("budget: architect:")
    assert letters[0]["field:text"] == MESSAGES[2]
    with redis.Redis.from_url(embedded_redis_url, decode_responses=True) as client:
        refusals = client.hgetall(metrics_key("arena_budget_refusals"))
        dead = client.hgetall(metrics_key("arena_dead_letters"))
    assert refusals == {'["group","tokens"]': "1"}
    assert dead == {'["budget"]': "1"}

    set_environment(monkeypatch, settings, ARENA_CAP_GROUP_TOKENS_PER_DAY="2000")
    shown = CliRunner().invoke(main, ["budget"])
    assert shown.exit_code == 0, shown.output
    assert "demo" in shown.output
    assert "/ 2,000" in shown.output
    report = json.loads(CliRunner().invoke(main, ["budget", "--json"]).output)
    assert report["caps_set"] is True
    demo = next(r for r in report["rows"] if r["scope"] == "group" and r["name"] == "demo")
    assert demo["today"]["tokens_cap"] == 2000
    used = demo["today"]["tokens"]
    assert f"group demo: {used:,} of 2,000 tokens" in notice.text  # what the notice said


async def test_a_raised_cap_lets_arena_retry_answer_the_message(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """A message refused by a cap is answered when retried under a higher cap."""
    low = _settings(tmp_path, embedded_redis_url, embedded_mqtt_url, cap_tokens_per_day=100)
    async with running_daemon(low):
        (answer,) = await _post_all(embedded_redis_url, MESSAGES[:1])
    assert answer[0].type == "notice"
    assert "this turn (about " in answer[0].text  # not reached: this turn would pass it
    assert "would pass the daily budget (all agents: 0 of 100 tokens used)" in answer[0].text
    (letter,) = _dead_letters(embedded_redis_url)
    assert letter["reason"].startswith("budget:")

    high = _settings(tmp_path, embedded_redis_url, embedded_mqtt_url, cap_tokens_per_day=100_000)
    set_environment(monkeypatch, high)
    with redis.Redis.from_url(embedded_redis_url, decode_responses=True) as client:
        (dead_id,) = [entry_id for entry_id, _ in client.xrange(deadletter_stream())]
    async with running_daemon(high):
        client = ArenaClient(embedded_redis_url)
        try:
            after = client.last_reply_id("demo")
            new_id = client.retry(dead_id)
            replies = await asyncio.to_thread(
                lambda: list(client.replies("demo", new_id, 20, after=after))
            )
        finally:
            client.close()
    assert [r.type for r in replies] == ["reply"]
    assert _dead_letters(embedded_redis_url) == []


def _outcomes(url: str, groups: list[str]) -> dict[str, int]:
    """How many replies, notices, 80 % warnings, "used up" notices and "done" items the
    groups' outbound streams hold."""
    counts = {"reply": 0, "notice": 0, "warning": 0, "used_up": 0, "done": 0}
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for group in groups:
            for _id, item in client.xrange(outbox_stream(group)):
                kind = item["type"]
                if kind == "notice" and "% used" in item["text"]:
                    kind = "warning"
                elif kind == "notice" and "used up" in item["text"]:
                    kind = "used_up"
                counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_two_daemons_share_the_caps(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """Two daemon processes answering 40 messages in 20 groups under one overall cap of 3,000
    tokens: together they count no more than the cap, the rest are told, and the 80 % warning
    and the used-up notice come once at most (at least one of them)."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    logs = [tmp_path / "alpha.log", tmp_path / "beta.log"]
    # Leases long enough that a busy machine's pauses do not cost one.
    caps = {"ARENA_CAP_TOKENS_PER_DAY": "3000", "ARENA_LEASE_TTL_S": "4"}
    procs = [
        spawn_daemon(settings, logs[0], "alpha", **caps),
        spawn_daemon(settings, logs[1], "beta", **caps),
    ]
    groups = [f"g{n:02d}" for n in range(20)]
    try:
        await wait_until(
            lambda: len(_holders(embedded_redis_url)) == 2,
            timeout_s=120,
            what="both daemons to hold partitions",
        )
        with redis.Redis.from_url(embedded_redis_url) as client:
            for n in range(40):
                client.xadd(inbox_stream(), {"group": groups[n % 20], "text": f"note {n}"})
        await wait_until(
            lambda: _outcomes(embedded_redis_url, groups)["done"] >= 40,
            timeout_s=300,
            what="the 40 notes to be handled",
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=120) for proc in procs]
    assert codes == [0, 0], logs[0].read_text()[-2000:] + logs[1].read_text()[-2000:]
    counts = _outcomes(embedded_redis_url, groups)
    assert counts["reply"] > 0
    assert counts["notice"] > 0
    assert counts["reply"] + counts["notice"] == 40
    # 80 % of the cap is told at most once, whichever daemon saw it, and used up at most once;
    # at least one of them. A settled call is what looks at the counters: when turns admitted
    # meanwhile (reserved, not yet settled) took the cap from under 80 % to its end, the first
    # look finds it used up, and only that is told.
    assert counts["warning"] <= 1
    assert counts["used_up"] <= 1
    assert counts["warning"] + counts["used_up"] >= 1
    with redis.Redis.from_url(embedded_redis_url, decode_responses=True) as client:
        (key,) = client.keys("arena:spend:*")
        counters = {k: int(v) for k, v in client.hgetall(key).items() if ":" in k}
    # Each turn is admitted only if its input fits under the cap; turns already admitted may
    # still pass it by their output and tool steps (the documented rule: a turn is admitted or
    # refused as a whole), and with many groups' turns in flight on two daemons, several may.
    assert 0 < counters["tokens:all:*"] <= 3000 + _beyond_admission(settings, groups)
    agents = sum(v for k, v in counters.items() if k.startswith("tokens:agent:"))
    assert agents == counters["tokens:all:*"]


def _beyond_admission(settings: Settings, groups: list[str]) -> int:
    """What the replies the groups got cost beyond what their admission checked: each reply's
    output, and its memory tool steps after the first call (never refused once a turn began)."""
    engine = make_engine(settings.effective_database_url)
    try:
        store = HistoryStore(engine)
        metas = [stored.meta for group in groups for stored in store.recent(group, 100)]
    finally:
        engine.dispose()
    total = 0
    for meta in metas:
        total += int(meta.get("usage", {}).get("output_tokens", 0))
        for step in (meta.get("tools") or {}).get("steps", [])[1:]:
            total += sum(int(v) for k, v in step.items() if k.endswith("_tokens"))
    return total


def _holders(url: str) -> set[str]:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        return {h for h in client.mget([lease_key(f"p{p}") for p in range(PARTITIONS)]) if h}


def _arena(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


async def test_arena_budget_shows_the_caps_the_running_daemon_enforces(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """The daemon was started with a group cap this shell does not set: `arena budget`,
    `GET /api/budget`'s report and `arena check` show the cap the daemon enforces while it
    runs; once it stopped, this shell's settings again."""
    settings = _settings(
        tmp_path, embedded_redis_url, embedded_mqtt_url, cap_group_tokens_per_day=2000
    )
    set_environment(monkeypatch, settings)  # no ARENA_CAP_* here
    async with running_daemon(settings):
        await _post_all(embedded_redis_url, MESSAGES[:1])
        as_json = await asyncio.to_thread(_arena, "budget", "--json")
        shown = await asyncio.to_thread(_arena, "budget")
        checked = await asyncio.to_thread(_arena, "check")
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output)
    assert report["caps_set"] is True
    assert report["caps_from"] == "daemon"
    demo = next(r for r in report["rows"] if r["scope"] == "group" and r["name"] == "demo")
    assert demo["today"]["tokens_cap"] == 2000
    assert "caps as enforced by the running daemon" in shown.output
    assert "/ 2,000" in shown.output
    assert checked.exit_code == 0, checked.output
    assert "no daily caps set" in checked.output  # this shell's settings, as before
    assert "the running daemon enforces other caps: daily per group 2,000 tokens" in (
        checked.output
    )

    after = json.loads((await asyncio.to_thread(_arena, "budget", "--json")).output)
    assert after["caps_from"] == "settings"
    assert after["caps_set"] is False
    assert "caps from this shell's settings" in (await asyncio.to_thread(_arena, "budget")).output
