"""`arena up` with more than one daemon (ARENA_DAEMONS): the daemons share the groups, every
message is answered once and in order, a daemon that dies is started again, and stopping
`arena up` stops them all. Real `arena up` processes, the offline model."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.core.wire import PARTITIONS, lease_key
from tests.arena_up import (
    Arena,
    alive,
    answered,
    arenas,
    check_answered_once_in_order,
    post_messages,
    processes_on,
)
from tests.waiting import block_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals, /proc"),
]

GROUPS = [f"team{n}" for n in range(8)]


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[Arena]:
    yield from arenas(tmp_path)


def _daemons(arena: Arena) -> list[int]:
    """The pids of the run's daemons beside `arena up` itself."""
    found = []
    for pid in processes_on(arena.data):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"daemon" in cmdline:
            found.append(pid)
    return found


def _owners(url: str) -> set[str]:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        names = client.mget([lease_key(f"p{p}") for p in range(PARTITIONS)])
    return {name for name in names if name}


def test_two_daemons_share_the_groups_and_one_killed_is_started_again(arena: Arena):
    """With ARENA_DAEMONS=2 a second daemon runs beside `arena up`'s own and holds part of the
    partitions; killed with -9 mid-stream it is started again under the same name, and all 300
    messages are answered exactly once, in order per group; SIGTERM stops everything."""
    arena.env["ARENA_DAEMONS"] = "2"
    up = arena.start()
    (child,) = _daemons(arena)
    assert child in arena.record()["workers"]  # type: ignore[operator]
    block_until(lambda: len(_owners(arena.url)) == 2, timeout_s=60, what="two lease holders")
    posted = post_messages(arena.url, GROUPS, 200)
    block_until(lambda: answered(arena.url, GROUPS) >= 20, timeout_s=120, what="the first answers")
    os.kill(child, signal.SIGKILL)
    block_until(
        lambda: [pid for pid in _daemons(arena) if pid != child],
        timeout_s=60,
        what="another daemon started",
    )
    for group, ids in post_messages(arena.url, GROUPS, 100, start=200).items():
        posted.setdefault(group, []).extend(ids)
    block_until(lambda: answered(arena.url, GROUPS) >= 300, timeout_s=300, what="every answer")
    check_answered_once_in_order(arena.url, posted)
    block_until(lambda: len(_owners(arena.url)) == 2, timeout_s=60, what="two lease holders")
    log = arena.log(0).read_text()
    assert f"daemon {child} exited with code -9; starting another" in log
    (second,) = _daemons(arena)
    up.send_signal(signal.SIGTERM)
    assert up.wait(timeout=60) == 0, log[-3000:]
    assert "Traceback" not in arena.log(0).read_text()
    assert not alive(second)
    assert processes_on(arena.data) == []
