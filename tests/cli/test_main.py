"""The ``arena`` command as people use it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from tests.arena_helpers import REPO, read_until, write_team
from tests.waiting import block_until


def _arena(*args: str, env: dict[str, str]) -> Result:
    """`arena ARGS` run in this process with the variables ``env`` set."""
    return CliRunner().invoke(main, list(args), env=env)


def _status_once_acknowledged(env: dict[str, str]) -> dict[str, Any]:
    """`arena status --json` once nothing is pending: a reply is published before its message
    is acknowledged (nothing is lost if the daemon dies between), and the acknowledgement
    follows within moments."""
    reports: list[dict[str, Any]] = []

    def acknowledged() -> bool:
        status = _arena("status", "--json", env=env)
        assert status.exit_code == 0, status.output
        reports.append(json.loads(status.stdout))
        return bool(reports[-1]["streams"]["pending"] == 0)

    block_until(acknowledged, timeout_s=10, what="the message acknowledged")
    return reports[-1]


@pytest.mark.slow
def test_up_post_wait_history_and_clean_stop(tmp_path: Path, free_port: int):
    """`arena up` on embedded services answers `arena post --wait`, keeps history across a
    restart, and stops with exit 0 on SIGTERM; with it stopped, `post` says how to start it.
    `arena up` runs as a process; the commands talking to it run in this one."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_WORKSPACES_DIR": str(tmp_path / "workspaces"),  # not the checkout's
        "ARENA_MQTT_PORT": str(free_port),
        "ARENA_REDIS_PORT": "0",  # the unix socket only: nothing else may need the port
        # No background worker: nothing here needs one (test_crash_recovery's runs have one).
        "ARENA_WORKERS": "0",
        "ARENA_DAEMONS": "1",
        "ARENA_WEB_PORT": "0",  # no console: tests run side by side
    }
    log = tmp_path / "up.log"
    for round_ in range(2):
        with log.open("a") as errors:
            up = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "up"],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        try:
            try:
                printed = read_until(up, "arena: ready", timeout_s=60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{log.read_text()[-3000:]}") from None
            assert any("redis.sock" in line for line in printed)
            assert any(f"127.0.0.1:{free_port}" in line for line in printed)
            if round_ == 0:
                posted = _arena(
                    "post",
                    "demo",
                    "@architect we decided to use JWT, please design the token schema",
                    "--wait",
                    "30",
                    env=env,
                )
                assert posted.exit_code == 0, posted.output
                first, reply = posted.stdout.splitlines()[:2]
                assert first.split("-")[0].isdigit()
                assert reply.startswith("architect: [offline]")
                assert "SAVE_MEMORY" not in posted.stdout
            history = _arena("history", "demo", "--json", env=env)
            rows = [json.loads(line) for line in history.stdout.splitlines()]
            assert [r["sender"] for r in rows] == ["user", "architect"]
            report = _status_once_acknowledged(env)
            assert report["groups"][0]["group"] == "demo"
            # From a shell whose settings name another port, check finds the broker in data/.
            elsewhere = {**env, "ARENA_MQTT_PORT": "1"}
            checked = _arena("check", env=elsewhere)
            assert re.search(r"ok\s+mqtt\s+reachable", checked.stdout), checked.output
        finally:
            up.send_signal(signal.SIGTERM)
            code = up.wait(timeout=15)
            rest = up.stdout.read() if up.stdout else ""
            if up.stdout:
                up.stdout.close()
        assert code == 0
        assert "arena: stopped" in rest
    down = _arena("post", "demo", "anyone?", env=env)
    assert down.exit_code == 1
    assert "no Redis is listening" in down.stderr
    assert "arena up" in down.stderr
    assert "Traceback" not in down.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["post", "Bad/Group", "hi"], "group: 'Bad/Group' is not a valid group id"),
        (["post", "demo", "   "], "text: the message is empty"),
        (["post", "demo", "x" * 40_000], "text: the message is 40000 bytes; the limit is 32768"),
        (["post", "demo", "hi", "--sender", "../x"], "sender: '../x' is not a valid sender"),
        (["history", "../etc"], "group: '../etc' is not a valid group id"),
    ],
)
def test_bad_input_is_refused_with_one_clear_line(args, expected):
    """Bad groups, texts and senders are refused before anything is sent."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert expected in result.output
    assert "Traceback" not in result.output


def test_bad_setting_names_the_variable(monkeypatch):
    """A bad setting fails at start with one line naming it."""
    monkeypatch.setenv("ARENA_TZ", "Mars/Olympus")
    result = CliRunner().invoke(main, ["route", "hello"])
    assert result.exit_code == 1
    assert "ARENA_TZ: unknown time zone 'Mars/Olympus'" in result.output


def test_route_dry_run_uses_the_real_rules(monkeypatch):
    """`arena route` shows the decision for the shipped agents, mentions first."""
    monkeypatch.chdir(REPO)
    mention = CliRunner().invoke(main, ["route", "@tester and @architect, look", "--json"])
    assert mention.exit_code == 0, mention.output
    decision = json.loads(mention.output)
    assert decision["reason"] == "mention"
    assert decision["agents"] == ["tester", "architect"]
    plain = CliRunner().invoke(main, ["route", "hello"])
    assert plain.exit_code == 0
    assert "reason:" in plain.output


def _checked_team(tmp_path: Path, monkeypatch, redis_url: str, mqtt_url: str) -> Path:
    """The test team's folder, and `arena check` pointed at it and at the services."""
    agents = write_team(tmp_path)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("MQTT_URL", mqtt_url)
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ARENA_AGENTS_DIR", str(agents))
    monkeypatch.setenv("ARENA_PROMPTS_DIR", str(REPO / "prompts"))
    return agents


def test_check_passes_with_services_and_fails_on_bad_agent(
    tmp_path: Path, monkeypatch, embedded_redis_url: str, embedded_mqtt_url: str
):
    """`arena check` exits 0 when all is well and 1 naming the broken agent file."""
    agents = _checked_team(tmp_path, monkeypatch, embedded_redis_url, embedded_mqtt_url)
    good = CliRunner().invoke(main, ["check"])
    assert good.exit_code == 0, good.output
    assert "redis" in good.output
    assert "mqtt" in good.output
    assert "no daily caps set" in good.output
    monkeypatch.setenv("ARENA_CAP_GROUP_TOKENS_PER_DAY", "2000")
    monkeypatch.setenv("ARENA_CAP_USD_PER_DAY", "5")
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"m": {"input": 3, "output": 15}}')
    capped = CliRunner().invoke(main, ["check"])
    assert capped.exit_code == 0, capped.output
    (line,) = [row for row in capped.output.splitlines() if row.split()[1:2] == ["caps"]]
    assert "daily per group 2,000 tokens; all agents $5.00" in line
    assert "priced as the dearest" in capped.output
    (agents / "ping.yaml").write_text("id: ping\nname: Ping\nrole: 3\nmodel: [x]\n")
    bad = CliRunner().invoke(main, ["check"])
    assert bad.exit_code == 1
    assert "ping.yaml" in bad.output
    assert bad.output.count("ping.yaml") == 1  # the checks that need the agents say so once
    assert "templates not checked: the agent files do not load" in " ".join(bad.output.split())
    (agents / "ping.yaml").write_text("id: ping\nname: Ping\nrole: r\nmodel: m\ncaps: 5\n")
    shaped = CliRunner().invoke(main, ["check"])
    assert shaped.exit_code == 1
    assert "caps: must be a mapping of fields" in shaped.output
    assert "_Caps" not in shaped.output


def test_commands_without_a_running_redis_say_how_to_start(tmp_path: Path, monkeypatch):
    """With nothing running, `status` and `tail` say how to start the daemon."""
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path / "data"))
    for args in (["status"], ["tail", "demo"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, args
        assert "arena up" in result.output


def test_tail_prints_replies_as_they_arrive(tmp_path: Path, embedded_redis_url: str):
    """`arena tail` prints each reply published after it started."""
    import asyncio

    from redis.asyncio import Redis

    from orchestrator.adapters.bus import Bus
    from orchestrator.core.wire import Outbound

    env = {"PATH": os.environ.get("PATH", ""), "REDIS_URL": embedded_redis_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "tail", "demo"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal, even when this process ignores SIGINT (started in the
        # background by a shell), which the child would inherit.
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stderr is not None
        assert "following group demo" in proc.stderr.readline()

        async def publish() -> None:
            redis = Redis.from_url(embedded_redis_url)
            bus = Bus(redis, "test")
            appended = await bus.publish_all(
                [
                    Outbound(
                        type=kind,
                        id=f"1-0:{n}",
                        group="demo",
                        in_reply_to="1-0",  # type: ignore[arg-type]
                        sender="ping",
                        kind="agent",
                        text=f"line {n}",
                    )
                    for n, kind in enumerate(("reply", "done"))
                ]
            )
            assert appended == 2
            await redis.aclose()

        asyncio.run(publish())
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ping: line 0"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        said = proc.stderr.read() if proc.stderr else ""
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
    assert code == 0, said  # Ctrl-C ends it quietly
    assert "Traceback" not in said


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_status_exits_1_when_messages_wait_unread(
    tmp_path: Path, embedded_redis_url: str, monkeypatch
):
    """With messages in the inbox and no daemon reading, `arena status` says it is stuck and
    exits 1 (for monitors); with the threshold not reached it exits 0."""
    import redis as sync_redis

    from orchestrator.core.wire import inbox_stream

    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path / "data"))
    with sync_redis.Redis.from_url(embedded_redis_url) as raw:
        raw.xgroup_create(inbox_stream(), "arena", id="0", mkstream=True)
        raw.xadd(inbox_stream(), {"group": "demo", "text": "anyone?"})
    monkeypatch.setenv("ARENA_STUCK_AFTER_S", "0.001")
    stuck = CliRunner().invoke(main, ["status", "--json"])
    assert stuck.exit_code == 1, stuck.output
    report = json.loads(stuck.output)
    assert report["streams"]["lag"] == 1
    assert "1 messages wait and no daemon has read the inbox" in report["stuck"][0]
    monkeypatch.setenv("ARENA_STUCK_AFTER_S", "3600")
    calm = CliRunner().invoke(main, ["status"])
    assert calm.exit_code == 1  # still no daemon at all: nobody has ever read
    assert "no daemon has read the inbox for ever" in calm.output


def test_check_fails_on_an_agents_dollar_cap_with_every_model_free(
    tmp_path: Path, monkeypatch, embedded_redis_url: str, embedded_mqtt_url: str
):
    """An agent's own `caps: {usd_per_day: ...}` with only free models could never be
    reached: `arena check` says so on the caps line and exits 1."""
    agents = _checked_team(tmp_path, monkeypatch, embedded_redis_url, embedded_mqtt_url)
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"offline": {"input": 0, "output": 0}}')
    ping = agents / "ping.yaml"
    ping.write_text(ping.read_text() + "caps: {usd_per_day: 1}\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 1, result.output
    (line,) = [row for row in result.output.splitlines() if row.split()[1:2] == ["caps"]]
    assert "agent ping: caps.usd_per_day: needs prices: set ARENA_MODEL_PRICES" in line
    monkeypatch.setenv("ARENA_CAP_USD_PER_DAY", "inf")
    bad = CliRunner().invoke(main, ["check"])
    assert bad.exit_code == 1
    assert "ARENA_CAP_USD_PER_DAY: Input should be a finite number" in bad.output
    assert "Traceback" not in bad.output
