"""Real ``arena up`` processes on a data folder of a test's (:class:`Arena`), and what tells
whether the processes of a run are still there (:func:`alive`, :func:`processes_on`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from orchestrator.core.wire import outbox_stream
from tests.arena_helpers import REPO, write_team
from tests.ports import free_port
from tests.waiting import block_until

__all__ = [
    "Arena",
    "acting_agent",
    "alive",
    "answered",
    "arenas",
    "check_answered_once_in_order",
    "post_messages",
    "processes_on",
]


def acting_agent(
    folder: Path, agent_id: str, role: str, profile: str, keywords: Sequence[str]
) -> None:
    """Write into the agents ``folder`` an agent whose turn is a Claude Code run on the project
    (``runtime: claude-code``, ``profile``) when a message names one of ``keywords``."""
    document = {
        "id": agent_id,
        "name": agent_id.capitalize(),
        "role": role,
        "model": "claude-test",
        "runtime": "claude-code",
        "code": {"profile": profile, "rules": [{"name": "acts", "keywords": list(keywords)}]},
    }
    (folder / f"{agent_id}.yaml").write_text(json.dumps(document, indent=2), encoding="utf-8")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return ") Z " not in stat.read_text()  # a zombie has ended
    return True


def processes_on(data: Path) -> list[int]:
    """Live processes started for ``data`` (their environment names it), zombies aside."""
    wanted = os.fsencode(f"ARENA_DATA_DIR={data}")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if wanted in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


class Arena:
    """`arena up` processes on one data folder, all ended when the test ends."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.data = tmp_path / "data"
        self.redis_port = free_port()
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "ARENA_DATA_DIR": str(self.data),
            "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
            "ARENA_WORKSPACES_DIR": str(tmp_path / "workspaces"),
            "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
            "ARENA_MQTT_PORT": str(free_port()),
            "ARENA_REDIS_PORT": str(self.redis_port),
            "ARENA_WORKERS": "1",
            "ARENA_DAEMONS": "1",
            "ARENA_WEB_PORT": "0",  # no console: tests run side by side
            "ARENA_LEASE_TTL_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen: set[int] = set()  # every pid any run recorded

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def log(self, n: int) -> Path:
        return self.tmp_path / f"up-{n}.log"

    def start(self) -> subprocess.Popen[bytes]:
        """Start `arena up` and wait until it is ready."""
        log = self.log(len(self.procs))
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "up"],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        block_until(
            lambda: "arena: ready" in log.read_text() or proc.poll() is not None,
            timeout_s=120,
            what="arena up to be ready",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        self.record()
        return proc

    def run(self, *args: str) -> Result:
        """Run `arena ARGS` on this data folder in this process, to its end (for a command that
        stops at once: the refusals); what it printed is kept."""
        return CliRunner().invoke(main, list(args), env=self.env)

    def record(self) -> dict[str, object]:
        """The pid file of the run on the data folder (its pids are remembered)."""
        path = self.data / "arena-up.pid"
        record: dict[str, object] = json.loads(path.read_text()) if path.exists() else {}
        for value in record.values():
            for pid in value if isinstance(value, list) else [value]:
                if isinstance(pid, int):
                    self.seen.add(pid)
        return record

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.record()
        for pid in self.seen:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def arenas(tmp_path: Path) -> Iterator[Arena]:
    """For a fixture: `arena up` runs on a data folder of the test's, all ended after it."""
    runs = Arena(tmp_path)
    try:
        yield runs
    finally:
        runs.close()


def post_messages(
    url: str, groups: Sequence[str], count: int, start: int = 0
) -> dict[str, list[str]]:
    """Post messages ``n{start}`` … straight to the inbox, message n in ``groups[n % len]``;
    their entry ids by group, in order."""
    posted: dict[str, list[str]] = {}
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for n in range(start, start + count):
            group = groups[n % len(groups)]
            entry = client.xadd("arena:inbox", {"group": group, "sender": "alex", "text": f"n{n}"})
            posted.setdefault(group, []).append(entry)
    return posted


def answered(url: str, groups: Sequence[str]) -> int:
    """How many messages of ``groups`` have their ``done`` item."""
    with redis.Redis.from_url(url) as client:
        return sum(
            1
            for group in groups
            for _id, fields in client.xrange(outbox_stream(group))
            if fields[b"type"] == b"done"
        )


def check_answered_once_in_order(url: str, posted: dict[str, list[str]]) -> None:
    """Each posted message has one reply and one ``done`` item, in posting order per group."""
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for group, ids in posted.items():
            items = [fields for _id, fields in client.xrange(outbox_stream(group))]
            assert [i["in_reply_to"] for i in items if i["type"] == "reply"] == ids, group
            assert [i["in_reply_to"] for i in items if i["type"] == "done"] == ids, group
