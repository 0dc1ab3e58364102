"""`arena tail` shows a run as it happens: its card, then each step, compactly and indented
under it, then its reply; and it goes on where it was after a Redis restart, steps included.
Seeded with raw XADDs, as the daemon and a run's worker write them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from orchestrator.adapters.redis_server import RedisServer
from orchestrator.core.coding import Step, steps_stream
from orchestrator.core.wire import Outbound, outbox_stream
from tests.arena_helpers import read_until, start_background, stop_process

MESSAGE = "1760000000000-0"
RUN = f"{MESSAGE}:1:developer"


def _say(url: str, group: str, kind: str, item_id: str, sender: str, text: str) -> None:
    item = Outbound(
        type=kind,  # type: ignore[arg-type]
        id=item_id,
        group=group,
        in_reply_to=MESSAGE,
        sender=sender,
        kind="notice" if kind == "notice" else "agent",
        text=text,
    )
    with redis.Redis.from_url(url) as raw:
        raw.xadd(outbox_stream(group), item.fields())  # type: ignore[arg-type]


def _step(url: str, group: str, n: int, line: str, *, run: str = RUN) -> None:
    kind = "result" if line == "ok" or line.startswith("error:") else "tool"
    step = Step(run=run, n=n, at="2026-01-05T09:00:00+00:00", kind=kind, line=line,
                tool="Bash", is_error=line.startswith("error:"))  # fmt: skip
    with redis.Redis.from_url(url) as raw:
        raw.xadd(steps_stream(group), step.fields())  # type: ignore[arg-type]


def _tail(url: str, group: str, data: Path) -> subprocess.Popen[str]:
    """`arena tail GROUP`, once it says it follows."""
    env = {"PATH": os.environ.get("PATH", ""), "REDIS_URL": url, "ARENA_DATA_DIR": str(data)}
    proc = start_background([sys.executable, "-m", "orchestrator", "tail", group], env)
    try:
        read_until(proc, f"following group {group}", timeout_s=60)
    except AssertionError:
        stop_process(proc)
        raise
    return proc


def test_tail_shows_a_runs_steps_between_its_card_and_its_reply(
    embedded_redis_url: str, unique_name: str, tmp_path: Path
):
    """The card; the first step with the agent and the run, the next ones alone (brackets as
    written); a step of another run names it; the reply. Steps from before it started are
    not shown."""
    url, group = embedded_redis_url, unique_name
    _step(url, group, 1, "Read old.py", run=f"{MESSAGE}:0:architect")  # before: not shown
    tail = _tail(url, group, tmp_path)
    try:
        _say(url, group, "notice", f"{RUN}:run", "arena", "Developer started a run")
        _step(url, group, 1, "Write hello.py")
        _step(url, group, 2, "ok")
        _step(url, group, 3, "Bash: cd [x] && python3 hello.py")
        _step(url, group, 4, "error: Exit code 1")
        _step(url, group, 1, "Read hello.py", run=f"{MESSAGE}:2:tester")
        _say(url, group, "reply", RUN, "developer", "I wrote hello.py")
        printed = read_until(tail, "developer: I wrote hello.py", timeout_s=30)
    finally:
        stop_process(tail)
    assert printed == [
        "! Developer started a run",
        f"  developer run {RUN} · Write hello.py",
        "  · ok",
        "  · Bash: cd [x] && python3 hello.py",
        "  · error: Exit code 1",
        f"  tester run {MESSAGE}:2:tester · Read hello.py",
        "developer: I wrote hello.py",
    ]


@pytest.mark.slow
@pytest.mark.timeout(180)  # more than its waits' sum: a busy machine may need most of them
def test_tail_goes_on_with_the_steps_after_a_redis_restart(tmp_path: Path):
    """kill -9 of Redis while a run goes on, then a restart on its socket and AOF: `arena
    tail` says so, then prints the steps appended after the restart, and none twice."""
    server = RedisServer(tmp_path / "redis", unix_socket=tmp_path / "redis" / "r.sock")
    server.start()
    tail = _tail(server.url, "restarts", tmp_path / "data")
    try:
        _step(server.url, "restarts", 1, "Write hello.py")
        read_until(tail, "Write hello.py", timeout_s=30)
        assert server.pid is not None
        server.kill()  # and wait: start() right after must start a new one
        read_until(tail, "Redis is not answering", timeout_s=30)
        server.start()
        read_until(tail, "Redis answers again; following group restarts", timeout_s=30)
        _step(server.url, "restarts", 2, "ok")
        _say(server.url, "restarts", "reply", RUN, "developer", "after the restart")
        printed = read_until(tail, "after the restart", timeout_s=30)
    finally:
        stop_process(tail)
        server.stop()
    assert printed == ["  · ok", "developer: after the restart"]
