"""`arena --help` and `arena post` start without importing the daemon's heavy libraries."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest

from orchestrator.cli.main import ArenaGroup, main
from tests.arena_helpers import REPO

HEAVY = (
    "anthropic",
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


@pytest.mark.parametrize("name", sorted(ArenaGroup.lazy))
def test_lazy_summaries_match_the_commands(name):
    """The summary `arena --help` shows for a lazy command is the command's own."""
    ctx = click.Context(main)
    command = main.get_command(ctx, name)
    assert command is not None
    assert ArenaGroup.lazy[name][1] == command.get_short_help_str(limit=1000)
