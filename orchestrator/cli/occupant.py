"""Who runs on a data folder: ``data/arena-up.pid`` records the ``arena up`` there, its
redis-server and workers, and its embedded MQTT broker's address, so a start after a crash stops
what the crashed run left behind instead of refusing, commands run from another shell find
the broker, and a command that finds the embedded Redis silent while ``arena up`` runs says
that it is restarting rather than that nothing runs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.adapters.probes import START_REDIS_HINT
from orchestrator.adapters.process_group import alive
from orchestrator.errors import ServiceError
from orchestrator.files import write_atomic
from orchestrator.settings import Settings

__all__ = [
    "Previous",
    "alive",
    "claim_data_dir",
    "release_data_dir",
    "running_mqtt_url",
    "running_up",
    "while_up",
    "write_record",
]

logger = logging.getLogger(__name__)


def _record_path(settings: Settings) -> Path:
    return settings.data_dir / "arena-up.pid"


def _read_record(path: Path) -> dict[str, object]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return record if isinstance(record, dict) else {}


def _pids(value: object) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 1]


def _proc(pid: int, name: str) -> bytes | None:
    """``/proc/PID/name`` (a file's bytes, or a link's target), None when unreadable."""
    path = Path(f"/proc/{pid}/{name}")
    try:
        return os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()
    except OSError:
        return None


def _is_arena_up(pid: int) -> bool:
    """Whether ``pid`` is a live ``arena up`` (without /proc to tell: any live process)."""
    if pid == os.getpid() or not alive(pid):
        return False  # the same pid as ours: an earlier run in a restarted container
    cmdline = _proc(pid, "cmdline")
    if cmdline is None:
        return not Path("/proc/self").exists()
    args = cmdline.split(b"\0")
    return b"up" in args and any(b"arena" in a or b"orchestrator" in a for a in args)


def _is_left_over(pid: int, kind: str, data_dir: Path) -> bool:
    """Whether ``pid`` is a redis-server, worker or extra daemon of an ``arena up`` on
    ``data_dir``."""
    if not alive(pid):
        return False
    if kind == "redis":
        exe = _proc(pid, "exe") or b""
        return b"redis-server" in exe and _proc(pid, "cwd") == os.fsencode(data_dir)
    args = (_proc(pid, "cmdline") or b"").split(b"\0")
    environ = (_proc(pid, "environ") or b"").split(b"\0")
    child = b"worker" in args or b"daemon" in args
    return child and os.fsencode(f"ARENA_DATA_DIR={data_dir}") in environ


def _end(pids: list[int], timeout_s: float) -> None:
    """SIGTERM each process group, then SIGKILL what is still alive after ``timeout_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:  # a worker leads its group: take its job along
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [pid for pid in pids if alive(pid)]
        if not pids:
            return


@dataclass(frozen=True, slots=True, kw_only=True)
class Previous:
    """What an earlier ``arena up`` on the data folder left: ``stopped`` says, for people,
    what was still running and has been stopped; ``workers`` are its workers' pids."""

    stopped: str | None = None
    workers: tuple[int, ...] = ()


def claim_data_dir(settings: Settings) -> Previous:
    """Record this ``arena up`` as the one running on the data folder.

    Stops what a crashed earlier run left running there (verified to be its redis-server and
    workers). Blocks for up to a few seconds: call it through a thread.

    Raises:
        ServiceError: another live ``arena up`` runs on the data folder.
    """
    data_dir = settings.data_dir.resolve()
    record = _read_record(_record_path(settings))
    for pid in _pids(record.get("up")):
        if _is_arena_up(pid):
            raise ServiceError(
                "data",
                f"`arena up` (pid {pid}) is already running on {data_dir}",
                hint="stop it first, or set ARENA_DATA_DIR to another folder",
            )
    workers = tuple(_pids(record.get("workers")))
    left = [(p, k) for k in ("redis", "workers") for p in _pids(record.get(k))]
    left = [(p, k) for p, k in left if _is_left_over(p, k, data_dir)]
    write_record(settings, os.getpid(), None, [])
    if not left:
        return Previous(workers=workers)
    _end([p for p, _ in left], timeout_s=10)
    names = ", ".join(f"{'redis-server' if k == 'redis' else 'worker'} {p}" for p, k in left)
    logger.warning("stopped what the previous arena up left running: %s", names)
    return Previous(
        stopped=f"the previous run ended without stopping; stopped its {names}", workers=workers
    )


def write_record(settings: Settings, up: int, redis: int | None, workers: list[int]) -> None:
    # The embedded broker's address (no secret in it), for commands run from other shells.
    mqtt = None if settings.mqtt_url else settings.effective_mqtt_url
    record = {"up": up, "redis": redis, "workers": workers, "mqtt": mqtt}
    write_atomic(_record_path(settings), json.dumps(record) + "\n")


def running_up(settings: Settings) -> int | None:
    """The pid of the live ``arena up`` running on the data folder (not this process), if any."""
    record = _read_record(_record_path(settings))
    return next((pid for pid in _pids(record.get("up")) if _is_arena_up(pid)), None)


def running_mqtt_url(settings: Settings) -> str | None:
    """The embedded broker of the ``arena up`` running on the data folder, if one is."""
    mqtt = _read_record(_record_path(settings)).get("mqtt")
    return mqtt if isinstance(mqtt, str) and running_up(settings) is not None else None


def while_up(settings: Settings, exc: ServiceError) -> ServiceError:
    """``exc`` as it should read given who runs on the data folder: the embedded Redis not
    answering while an ``arena up`` runs there is that Redis restarting (or stopping), not a
    daemon to start."""
    if exc.service != "redis" or exc.hint != START_REDIS_HINT or settings.redis_url:
        return exc
    pid = running_up(settings)
    if pid is None:
        return exc
    problem = (
        f"the Redis of `arena up` (pid {pid}) at {settings.effective_redis_url} is not"
        " answering; it may be restarting"
    )
    return ServiceError("redis", problem, hint="try again in a moment")


def release_data_dir(settings: Settings) -> None:
    path = _record_path(settings)
    if os.getpid() in _pids(_read_record(path).get("up")):
        path.unlink(missing_ok=True)
