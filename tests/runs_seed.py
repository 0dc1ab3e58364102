"""Claude Code runs written straight through ``RunStore``, as a run's job writes them: one that
ended well with its steps and what it changed, one that failed with its branch kept, one
running, one queued."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from orchestrator.memory.runs import RunStore, StoredStep

__all__ = ["DONE_OUTCOME", "SeededRuns", "seed_runs"]

DONE_OUTCOME: dict[str, Any] = {
    "turns": 3,
    "duration_ms": 70_000,
    "cost_usd": 0.0123,
    "usage": {
        "input_tokens": 1200,
        "output_tokens": 300,
        "cache_read_tokens": 4000,
        "cache_creation_tokens": 0,
    },
    "denials": [],
    "session_id": "session-1",
    "files": ["hello.py", "test_hello.py"],
    "stat": " hello.py      | +1 -0\n test_hello.py | +4 -0\n"
    " 2 files changed, 5 insertions(+), 0 deletions(-)",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "merged": True,
    "branch": None,
    "reason": None,
}


@dataclass(frozen=True, slots=True)
class SeededRuns:
    """The ids of the runs :func:`seed_runs` wrote, oldest first."""

    done: str
    failed: str
    running: str
    queued: str


def _run_id(group: str, n: int, agent: str) -> str:
    return f"{group}-{n}:1:{agent}"


def seed_runs(engine: Engine, group: str, now: datetime | None = None) -> SeededRuns:
    """Four runs of ``group``, asked for 3 h, 2 h, 10 min and 1 min before ``now``."""
    now = now or datetime.now(UTC)
    runs = RunStore(engine)

    def create(n: int, agent: str, ago: timedelta) -> str:
        run_id = _run_id(group, n, agent)
        runs.create(
            run_id=run_id, group=group, agent=agent, trigger_id=f"{group}-{n}",
            root_id=f"{group}-{n}", hop=1, why="code rule implement matched (keywords: create)",
            now=now - ago,
        )  # fmt: skip
        return run_id

    done = create(1, "ping", timedelta(hours=3))
    started = now - timedelta(hours=3) + timedelta(seconds=2)
    assert runs.claim(done, started)
    steps = (
        StoredStep(n=1, at=started, kind="tool", line="Write hello.py", tool="Write"),
        StoredStep(n=2, at=started, kind="tool", line="Bash: pytest -q", tool="Bash"),
        StoredStep(n=3, at=started, kind="result", line="1 failed", is_error=True),
        StoredStep(n=4, at=started, kind="text", line="Created hello.py"),
    )
    for step in steps:
        runs.add_step(done, step)
    runs.finish(
        done, status="done", text="Created hello.py that prints hello.", problem=None,
        outcome=DONE_OUTCOME, now=started + timedelta(seconds=70),
    )  # fmt: skip

    failed = create(2, "pong", timedelta(hours=2))
    started = now - timedelta(hours=2)
    assert runs.claim(failed, started)
    kept = {
        **DONE_OUTCOME, "files": ["app.py"], "stat": " app.py | +2 -1\n 1 file changed",
        "merged": False, "branch": "arena/run-2", "reason": "the run failed", "cost_usd": None,
    }  # fmt: skip
    runs.finish(
        failed, status="failed", text="", problem="denied WebFetch", outcome=kept,
        now=started + timedelta(seconds=5),
    )  # fmt: skip

    running = create(3, "ping", timedelta(minutes=10))
    assert runs.claim(running, now - timedelta(minutes=9))
    runs.add_step(running, StoredStep(n=1, at=now, kind="tool", line="Read app.py", tool="Read"))

    queued = create(4, "pong", timedelta(minutes=1))
    return SeededRuns(done=done, failed=failed, running=running, queued=queued)
