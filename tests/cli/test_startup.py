"""`arena --help`, `arena post` and every command that reads start without importing the
daemon's heavy libraries: each imports what it needs to answer, and no more."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

import click
import pytest

from orchestrator.cli.main import ArenaGroup, main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.runs import RunStore
from orchestrator.memory.session.store import NewMemory, SessionMemory
from tests.arena_helpers import REPO
from tests.history_seed import write_history

HEAVY = (
    "anthropic",
    "claude_agent_sdk",
    "httpx",
    "rq",
    "apscheduler",
    "amqtt",
    "sqlalchemy",
    "sqlmodel",
    "jinja2",
    "tiktoken",
)


def _imported(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `python -X importtime -m orchestrator ARGS`; the top-level packages it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, names


def test_help_imports_no_heavy_library(tmp_path):
    """`arena --help` lists every command without importing the model SDK, SQL or RQ."""
    done, names = _imported("--help", env={"ARENA_DATA_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "memory" in done.stdout
    assert "summarize" in done.stdout
    assert "orchestrator" in names  # the import log was read
    assert sorted(names & set(HEAVY)) == []


def test_post_imports_no_heavy_library(tmp_path, embedded_redis_url):
    """`arena post` needs Redis and the settings only."""
    env = {"ARENA_DATA_DIR": str(tmp_path), "REDIS_URL": embedded_redis_url}
    done, names = _imported("post", "demo", "hello", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().split("-")[0].isdigit()
    assert "redis" in names
    # Loading the settings checks ARENA_HEARTBEAT_CRON with APScheduler's cron parser (a few
    # milliseconds): bad configuration fails at start, so that import stays.
    assert sorted(names & set(HEAVY) - {"apscheduler"}) == []


# The libraries each read command may import, of LIBRARIES: what it needs to answer. Loading the
# settings checks ARENA_HEARTBEAT_CRON with APScheduler's cron parser, so every command has it.
LIBRARIES = {*HEAVY, "aiomqtt", "paho", "redis", "yaml", "fastapi", "starlette", "uvicorn"}
SQL = {"sqlalchemy", "sqlmodel"}
AGENTS = {"yaml", "tiktoken"}  # the agent files, and the token counts their caps are in
READS = {
    "history demo": SQL,
    "tail demo": {"redis"},
    "dead-letters": {"redis"},
    "route hello": AGENTS,
    "route /approve": set(),
    "budget": {"redis", *AGENTS},
    "status": {"redis", "rq", *SQL, *AGENTS},
    "status --json": {"redis", "rq", *SQL, *AGENTS},
    "jobs": {"redis", "rq", *SQL, *AGENTS},
    "memory list": SQL,
    "memory search token": SQL,
    "memory stats": SQL,
    "memory show 1": SQL,
    "growth ping": {*SQL, *AGENTS},
    "logs ping": AGENTS,
    "summary demo": AGENTS,  # beside `arena logs`, which reads the agent files
    "context ping demo": {*SQL, *AGENTS, "jinja2"},
    "runs": SQL,
    "runs demo --json": SQL,
    "run show 1-0:1:ping": SQL,
    "approvals": SQL,
    "approvals --state all --json": SQL,
    "allow": SQL,
    "allow ping --json": {*SQL, *AGENTS},
    "check": {"redis", "aiomqtt", "paho", *SQL, *AGENTS, "jinja2"},
}


@pytest.fixture
def arena_data(settings_env, engine, embedded_redis_url, embedded_mqtt_url) -> dict[str, str]:
    """A group with a message, a memory (id 1) and a run (1-0:1:ping), and the servers, for
    `arena` processes."""
    at = datetime(2026, 4, 1, 10, 0, tzinfo=UTC)
    message = ChatMessage(
        id="1-0", group="demo", sender="alex", kind=MessageKind.HUMAN, text="hi", created_at=at
    )
    write_history(engine, message)
    memory = NewMemory(
        scope="session",
        scope_id="demo",
        type="decision",
        content="we use token auth",
        now=at,
        agent="ping",
        group_id="demo",
    )
    assert SessionMemory(engine).write(memory).record.id == 1
    RunStore(engine).create(
        run_id="1-0:1:ping", group="demo", agent="ping", trigger_id="1-0", root_id="1-0",
        hop=1, why="code rule implement matched", now=at,
    )  # fmt: skip
    return {"REDIS_URL": embedded_redis_url, "MQTT_URL": embedded_mqtt_url}


@pytest.mark.parametrize("command", sorted(READS))
def test_read_command_imports_only_what_it_needs(command, arena_data):
    """Each command that reads answers without importing a library it does not use."""
    args = command.split()
    if args[0] == "tail":  # it follows until stopped: run it until it says it follows
        names = _started_tail(arena_data)
    else:
        done, names = _imported(*args, env=arena_data)
        assert done.returncode == 0, done.stderr[-2000:]
    assert "orchestrator" in names  # the import log was read
    assert sorted(names & LIBRARIES - {"apscheduler"} - READS[command]) == []


def _started_tail(env: dict[str, str]) -> set[str]:
    """`arena tail demo` until its "following" line; the top-level packages it imported."""
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", "tail", "demo"],
        cwd=REPO,
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    ) as tail:
        assert tail.stderr is not None
        try:
            for line in tail.stderr:
                lines.append(line)
                if "following group demo" in line:
                    break
        finally:
            tail.kill()
    assert "following group demo" in lines[-1], "".join(lines[-20:])
    return {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in lines
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.parametrize("name", sorted(ArenaGroup.lazy))
def test_lazy_summaries_match_the_commands(name):
    """The summary `arena --help` shows for a lazy command is the command's own."""
    ctx = click.Context(main)
    command = main.get_command(ctx, name)
    assert command is not None
    assert ArenaGroup.lazy[name][1] == command.get_short_help_str(limit=1000)
