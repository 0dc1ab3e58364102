"""What the benchmarks need to run daemon and worker processes of their own: an environment
built from scratch, a port nobody listens on, the agents' starting files, and `arena`
processes started and watched."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

__all__ = [
    "REPO",
    "check_running",
    "copy_workspaces",
    "daemon_environment",
    "dead_port",
    "start_arena",
    "stop_arena",
]

REPO = Path(__file__).resolve().parents[2]


def dead_port() -> int:
    """A local TCP port nothing listens on (MQTT pointed there: publishing must not block)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def daemon_environment(
    folder: Path, redis_url: str, mqtt_url: str, **settings: str
) -> dict[str, str]:
    """This process's environment without any Agent Arena, model or database settings, then
    the servers, folders under ``folder`` (agents and prompts from the repository unless
    ``settings`` say otherwise) and ``settings`` (``ARENA_…`` names and values)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_")}
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DATABASE_URL"):
        env.pop(name, None)
    env.update(
        REDIS_URL=redis_url,
        MQTT_URL=mqtt_url,
        ARENA_DATA_DIR=str(folder / "data"),
        ARENA_WORKSPACES_DIR=str(folder / "workspaces"),
        ARENA_AGENTS_DIR=str(REPO / "agents"),
        ARENA_PROMPTS_DIR=str(REPO / "prompts"),
        PYTHONUNBUFFERED="1",
    )
    env.update(settings)
    return env


def start_arena(command: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``arena COMMAND`` in a session of its own (so that it can be ended with what it
    starts), its output written to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator", command],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def check_running(popen: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Raise RuntimeError with the end of ``log`` if the process ``what`` has exited."""
    if popen.poll() is not None:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{what} exited (rc={popen.returncode}):\n{tail}")


def stop_arena(popen: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM to the process's session, then SIGKILL if it outlives ``timeout_s``."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=wait_s)


def copy_workspaces(target: Path, *, memory: bool = False) -> None:
    """The repository's identity files only (with ``memory``, their ``MEMORY.md`` too): notes
    left by earlier runs are not copied. Copying into a folder copied before refreshes it."""
    for agent in sorted((REPO / "workspaces").iterdir()):
        if not agent.is_dir():
            continue
        (target / agent.name).mkdir(parents=True, exist_ok=True)
        for item in agent.iterdir():
            wanted = item.suffix == ".md" and (memory or item.name != "MEMORY.md")
            if item.is_file() and wanted:
                shutil.copy2(item, target / agent.name / item.name)
