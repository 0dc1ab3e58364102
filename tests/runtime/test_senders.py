"""No person's message is attributable to an agent or to the arena itself: a sender that is an
agent's id or name, a reserved name, or a look-alike of one, is refused at every entry point
(`arena post`, the Python client, a raw XADD, the console, `arena import`)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest
import redis
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.wire import deadletter_stream, inbox_stream
from orchestrator.errors import ValidationError
from orchestrator.settings import Settings
from tests.arena_helpers import (
    environment,
    make_settings,
    outbox,
    running_daemon,
    set_team_environment,
)
from tests.waiting import wait_until
from tests.web_helpers import console_server, console_settings

# The test team is helper, ping and pong (named Helper, Ping and Pong).
AGENT_LOOKALIKES = ["ping", "Ping", "PING", "pong ", "p-o-n-g", "Help.er", "helper@"]
RESERVED = ["arena", "Arena", "ARENA ", "system", "System", "sys_tem"]
AS_AGENT = "an agent's name: a person cannot post as an agent"


def _post(settings: Settings, *args: str) -> Result:
    """`arena post ARGS` in this process, against ``settings``' services and team."""
    return CliRunner().invoke(main, ["post", *args], env=environment(settings))


def _inbox(redis_url: str) -> int:
    with redis.Redis.from_url(redis_url) as client:
        return int(client.xlen(inbox_stream()))


@pytest.mark.parametrize("sender", RESERVED)
def test_post_refuses_the_arenas_own_names_before_connecting(tmp_path: Path, sender: str):
    """`arena post --sender arena` (any case or spacing) is one line and exit 1, with no Redis."""
    settings = make_settings(tmp_path, "redis://127.0.0.1:1/0", "mqtt://127.0.0.1:1", None)
    result = _post(settings, "demo", "hi", "--sender", sender)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1, result.output
    assert "sender: " in result.output
    assert "reserved for the arena's own messages" in result.output
    assert "Traceback" not in result.output


async def test_post_and_client_refuse_an_agents_name(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """The CLI and the client refuse an agent's id or name in any case or spacing, with one
    line and nothing posted; a person's own name is posted as before."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    async with running_daemon(settings):
        for sender in AGENT_LOOKALIKES:
            result = _post(settings, "demo", "hi", "--sender", sender)
            assert result.exit_code == 1, (sender, result.output)
            assert result.output.count("\n") == 1, result.output
            assert AS_AGENT in result.output
            with ArenaClient(embedded_redis_url) as client, pytest.raises(ValidationError) as no:
                client.post("demo", "hi", sender)
            assert no.value.field == "sender"
        assert _inbox(embedded_redis_url) == 0
        assert _post(settings, "demo", "hi", "--sender", "Pingu").exit_code == 0


async def test_raw_xadd_under_an_agents_name_is_dead_lettered(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """A raw XADD as an agent or as the arena goes to the dead letters with the reason and is
    never answered; the person's message after it in the same group is."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    raw = redis.Redis.from_url(embedded_redis_url, decode_responses=True)
    async with running_daemon(settings):
        fakes = [
            raw.xadd(inbox_stream(), {"group": "demo", "text": "hi", "sender": s})
            for s in ("Pong", "ping ", "ARENA")
        ]
        real = raw.xadd(inbox_stream(), {"group": "demo", "text": "hi", "sender": "alex"})
        await wait_until(
            lambda: any(i["in_reply_to"] == real for i in outbox(embedded_redis_url, "demo")),
            timeout_s=20,
            what="the answer to alex",
        )
    letters = {f["entry_id"]: f for _, f in raw.xrange(deadletter_stream())}
    raw.close()
    assert sorted(letters) == sorted(fakes)
    reasons = [letters[entry]["reason"] for entry in fakes]
    assert reasons[0] == f"sender: 'Pong' is {AS_AGENT}"
    assert reasons[1] == f"sender: 'ping ' reads as 'Ping', which is {AS_AGENT}"
    assert reasons[2] == (
        "sender: 'ARENA' reads as 'arena', which is reserved for the arena's own messages"
    )
    listed = json.loads(
        CliRunner().invoke(main, ["dead-letters", "--json"], env=environment(settings)).stdout
    )
    assert [letter["reason"] for letter in listed] == reasons
    replied = {item["in_reply_to"] for item in outbox(embedded_redis_url, "demo")}
    assert replied == {real}


def test_console_refuses_an_agents_name(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """Posting from the console as an agent is a 400 with the CLI's line; nothing is posted."""
    settings = console_settings(tmp_path, embedded_redis_url, mqtt_url=embedded_mqtt_url)
    with console_server(settings, with_daemon=True) as base, httpx.Client(base_url=base) as api:
        for sender in ("Helper", "helper ", "arena"):
            response = api.post("/api/groups/demo/messages", json={"text": "hi", "sender": sender})
            assert response.status_code == 400, response.text
            assert response.json()["error"].startswith(f"sender: {sender!r} ")
        assert _inbox(embedded_redis_url) == 0
        posted = api.post("/api/groups/demo/messages", json={"text": "hi", "sender": "Hel per2"})
        assert posted.status_code == 202


def test_import_refuses_a_persons_line_under_an_agents_name(tmp_path: Path, monkeypatch):
    """`arena import`: a human line as an agent or the arena names its line and writes nothing;
    the same sender with kind agent (an agent's own message) is imported."""
    env = set_team_environment(tmp_path, monkeypatch, REDIS_URL="redis://127.0.0.1:1/0")
    at = "2024-03-01T09:15:00+00:00"
    lines = [
        {"sender": "alice", "text": "Ship it.", "created_at": at},
        {"sender": "Pong", "text": "I am pong.", "created_at": at},
        {"sender": "helper", "text": "Me too.", "created_at": at, "kind": "human"},
        {"sender": "System", "text": "Restarting.", "created_at": at},
    ]
    refused = _import(tmp_path, lines)
    assert refused.exit_code == 1
    assert f"line 2: sender: 'Pong' is {AS_AGENT}" in refused.output
    assert f"line 3: sender: 'helper' is {AS_AGENT}" in refused.output
    assert "line 4: sender: 'System' reads as 'system'" in refused.output
    assert "nothing imported: 3 problem(s)" in refused.output
    assert not (Path(env["ARENA_DATA_DIR"]) / "arena.db").exists()  # checked before opened
    agents_own = [lines[0], {**lines[2], "kind": "agent"}]
    imported = _import(tmp_path, agents_own)
    assert imported.exit_code == 0, imported.output
    assert _count(env) == 2


def _import(tmp_path: Path, lines: list[dict[str, str]]) -> Result:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return CliRunner().invoke(main, ["import", "demo", str(path)])


def _count(env: dict[str, str]) -> int:
    with sqlite3.connect(Path(env["ARENA_DATA_DIR"]) / "arena.db") as db:
        return int(db.execute("SELECT count(*) FROM messages").fetchone()[0])
