"""The daemon's resident memory: idle after start, and after handling N messages.

    python tests/bench/rss.py [--messages N] [--groups G] [--json OUT]

Starts an embedded Redis on a unix socket in a temporary folder and a real
``python -m orchestrator daemon`` process with the offline provider, a temporary data folder
(SQLite), a copy of the repository's identity files and its ``agents/`` and ``prompts/``. MQTT
points at a closed port (events wait in the daemon's queue, as when the broker is away).

RSS is read from ``/proc/PID/status`` (``VmRSS``, and ``VmHWM`` for the peak): idle is taken
once the daemon says it is ready and has sat for a few seconds with nothing posted; loaded is
taken after N messages over G groups (each mentioning an agent, every other one carrying a
decision, so replies save memories) have all been answered, and again after a few quiet
seconds. Prints a table and ends with one line ``idle_rss_mb=… loaded_rss_mb=…``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.adapters.redis_server import RedisServer  # noqa: E402
from orchestrator.core.wire import inbox_stream, outbox_stream  # noqa: E402
from tests.bench.daemon_env import copy_workspaces, daemon_environment, dead_port  # noqa: E402
from tests.waiting import block_until  # noqa: E402

READY_LINE = "arena: ready"
READY_TIMEOUT_S = 60.0
SETTLE_S = 3.0
IDLE_TARGET_MB = 150.0
AGENTS = ("architect", "developer", "tester", "receptionist")


def status_mb(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of a process, in MB (MiB)."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = round(int(rest.split()[0]) / 1024, 1)  # kB
    return values


def _text(n: int, group: str) -> str:
    agent = AGENTS[n % len(AGENTS)]
    if n % 2:
        return f"@{agent} we decided to keep step {n} of {group} small. What is next?"
    return f"@{agent} what do you think about item {n} in {group}?"


def _wait_ready(proc: subprocess.Popen[bytes], log: Path) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}: {log.read_text()[-2000:]}")
        return READY_LINE in log.read_text(encoding="utf-8", errors="replace")

    block_until(ready, timeout_s=READY_TIMEOUT_S, what="the daemon to be ready")


def _post_and_wait(client: redis.Redis, messages: int, groups: int, timeout_s: float) -> float:
    names = [f"g{n}" for n in range(groups)]
    started = time.monotonic()
    pipe = client.pipeline(transaction=False)
    for n in range(messages):
        group = names[n % groups]
        pipe.xadd(inbox_stream(), {"group": group, "sender": "bench", "text": _text(n, group)})
    pipe.execute()
    cursors = dict.fromkeys(names, "0")
    done = 0
    while done < messages:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"only {done} of {messages} messages answered in {timeout_s} s")
        streams: dict[Any, Any] = {outbox_stream(g): cursors[g] for g in names}
        response: Any = client.xread(streams, count=10_000, block=500)
        for stream, entries in response or []:
            group = stream.decode().split(":")[2]
            for entry_id, raw in entries:
                cursors[group] = entry_id.decode()
                done += raw.get(b"type") == b"done"
    return time.monotonic() - started


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    data = folder / "data"
    data.mkdir()
    copy_workspaces(folder / "workspaces")
    server = RedisServer(folder / "redis", unix_socket=folder / "redis.sock")
    server.start()
    log = folder / "daemon.log"
    proc: subprocess.Popen[bytes] | None = None
    client = redis.Redis.from_url(server.url)
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "daemon"],
                cwd=REPO,
                env=daemon_environment(
                    folder,
                    server.url,
                    f"mqtt://127.0.0.1:{dead_port()}",
                    ARENA_CONSUMER="rss-bench",
                    ARENA_LOG_LEVEL="WARNING",
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started = time.monotonic()
        _wait_ready(proc, log)
        ready_s = time.monotonic() - started
        time.sleep(SETTLE_S)
        idle = status_mb(proc.pid)
        elapsed = _post_and_wait(client, args.messages, args.groups, args.timeout_s)
        loaded = status_mb(proc.pid)
        time.sleep(SETTLE_S)
        settled = status_mb(proc.pid)
        return {
            "messages": args.messages,
            "groups": args.groups,
            "ready_s": round(ready_s, 1),
            "handle_s": round(elapsed, 1),
            "idle_rss_mb": idle["VmRSS"],
            "loaded_rss_mb": loaded["VmRSS"],
            "settled_rss_mb": settled["VmRSS"],
            "peak_rss_mb": settled["VmHWM"],
        }
    finally:
        client.close()
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arena-rss-", dir="/tmp") as tmp:
        result = run(args, Path(tmp))
    result["machine"] = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    verdict = "ok" if result["idle_rss_mb"] <= IDLE_TARGET_MB else "MISSED"
    print(f"daemon resident memory ({result['machine']}; offline model, SQLite, embedded Redis)")
    print(f"  {'ready after s':<24}{result['ready_s']}")
    print(f"  {'idle RSS MB':<24}{result['idle_rss_mb']}  (target <= {IDLE_TARGET_MB}: {verdict})")
    print(f"  {'messages / groups':<24}{result['messages']} / {result['groups']}")
    print(f"  {'handled in s':<24}{result['handle_s']}")
    print(f"  {'loaded RSS MB':<24}{result['loaded_rss_mb']}")
    print(f"  {'settled RSS MB':<24}{result['settled_rss_mb']}  ({SETTLE_S:g} s later)")
    print(f"  {'peak RSS MB (VmHWM)':<24}{result['peak_rss_mb']}")
    result["idle_target_mb"] = IDLE_TARGET_MB
    result["idle_verdict"] = verdict
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"idle_rss_mb={result['idle_rss_mb']} loaded_rss_mb={result['loaded_rss_mb']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
