"""End-to-end throughput: messages posted through Redis into a running daemon.

    python tests/bench/throughput.py [--messages N] [--groups G] [--agents A]
        [--provider offline|api] [--latency-ms L] [--json OUT]

Starts an embedded Redis and MQTT broker in a temporary folder, runs the daemon in this
process, posts N messages over G groups (each mentioning one of the first A agents), and waits
until every message's ``done`` item is on its group's outbound stream (replies persisted and
published). The model is the offline provider, or (``--provider api``) the fake Messages API
server reached through the real ``anthropic`` client, answering after L ms; with ``api`` the bare
SDK call rate against the same server is measured too. Prints a table and ends with one line
``messages_per_s=… overhead_p95_ms=…`` (plus ``sdk_calls_per_s=… ratio=…`` for api).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import re
import socket
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import redis
from anthropic import AsyncAnthropic

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator import daemon  # noqa: E402
from orchestrator.services import MqttBroker, RedisServer  # noqa: E402
from orchestrator.settings import load_settings  # noqa: E402
from orchestrator.wire import inbox_stream, outbox_stream  # noqa: E402
from tests.fakes import FakeMessagesServer  # noqa: E402

DURATION_RE = re.compile(r"duration_ms=(\d+)")


class _Durations(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.values: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = DURATION_RE.search(record.getMessage())
        if match:
            self.values.append(float(match.group(1)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _agents(folder: Path, count: int) -> None:
    folder.mkdir(parents=True)
    for n in range(count):
        (folder / f"agent{n}.yaml").write_text(
            textwrap.dedent(f"""
            id: agent{n}
            name: Agent {n}
            role: bench role {n}
            model: claude-bench
            max_concurrency: 1000
            default: {"true" if n == 0 else "false"}
        """)
        )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def _sdk_rate(base_url: str, calls: int) -> float:
    client = AsyncAnthropic(api_key="bench", base_url=base_url, max_retries=0)
    sem = asyncio.Semaphore(64)

    async def one() -> None:
        async with sem:
            await client.messages.create(
                model="claude-bench",
                max_tokens=64,
                messages=[{"role": "user", "content": "hello"}],
            )

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    elapsed = time.perf_counter() - started
    await client.close()
    return calls / elapsed


async def _run(args: argparse.Namespace, folder: Path, fake_url: str | None) -> dict[str, Any]:
    data = folder / "data"
    data.mkdir()
    _agents(folder / "agents", args.agents)
    server = RedisServer(data, unix_socket=data / "redis.sock")
    server.start()
    broker = MqttBroker("127.0.0.1", _free_port())
    await broker.start()
    values: dict[str, Any] = {
        "redis_url": server.url,
        "mqtt_url": broker.url,
        "data_dir": data,
        "agents_dir": folder / "agents",
        "workspaces_dir": folder / "workspaces",
        "prompts_dir": REPO / "prompts",
        "consumer": "bench",
        "log_level": "WARNING",
        "max_inflight": 5000,
    }
    if fake_url:
        values.update(anthropic_api_key="bench", anthropic_base_url=fake_url, model_max_retries=0)
    settings = load_settings(**values)
    durations = _Durations()
    logging.getLogger("orchestrator.pipeline").addHandler(durations)
    logging.getLogger("orchestrator.pipeline").setLevel(logging.INFO)
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(daemon.run(settings, stop, ready=ready.set))
    await ready.wait()
    client = redis.Redis.from_url(server.url)
    groups = [f"g{n}" for n in range(args.groups)]
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for n in range(args.messages):
        pipe.xadd(
            inbox_stream(),
            {
                "group": groups[n % len(groups)],
                "sender": "bench",
                "text": f"@agent{n % args.agents} message {n}",
            },
        )
    pipe.execute()
    per_group = {
        g: sum(1 for n in range(args.messages) if n % len(groups) == i)
        for i, g in enumerate(groups)
    }
    while True:
        done = 0
        for g in groups:
            items = client.xrange(outbox_stream(g))
            done += sum(1 for _id, f in items if f.get(b"type") == b"done")
        if done >= args.messages:
            break
        await asyncio.sleep(0.1)
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    client.close()
    await broker.stop()
    server.stop()
    latency = args.latency_ms if args.provider == "api" else 0
    overhead = [max(0.0, d - latency) for d in durations.values]
    return {
        "messages": args.messages,
        "groups": args.groups,
        "agents": args.agents,
        "provider": args.provider,
        "latency_ms": args.latency_ms,
        "elapsed_s": round(elapsed, 3),
        "messages_per_s": round(args.messages / elapsed, 1),
        "overhead_p50_ms": _pct(overhead, 0.5),
        "overhead_p95_ms": _pct(overhead, 0.95),
        "overhead_p99_ms": _pct(overhead, 0.99),
        "per_group": statistics.mean(per_group.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--provider", choices=["offline", "api"], default="offline")
    parser.add_argument("--latency-ms", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arena-bench-", dir="/tmp") as tmp:
        if args.provider == "api":
            with FakeMessagesServer(latency_s=args.latency_ms / 1000) as fake:
                result = asyncio.run(_run(args, Path(tmp), fake.base_url))
                result["sdk_calls_per_s"] = round(
                    asyncio.run(_sdk_rate(fake.base_url, min(args.messages, 500))), 1
                )
                result["ratio"] = round(result["messages_per_s"] / result["sdk_calls_per_s"], 3)
        else:
            result = asyncio.run(_run(args, Path(tmp), None))
    result["machine"] = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"throughput ({result['machine']})")
    for key in (
        "provider",
        "messages",
        "groups",
        "agents",
        "latency_ms",
        "elapsed_s",
        "messages_per_s",
        "overhead_p50_ms",
        "overhead_p95_ms",
        "overhead_p99_ms",
        "sdk_calls_per_s",
        "ratio",
    ):
        if key in result:
            print(f"  {key:<18}{result[key]}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    line = f"messages_per_s={result['messages_per_s']} overhead_p95_ms={result['overhead_p95_ms']}"
    if "sdk_calls_per_s" in result:
        line += f" sdk_calls_per_s={result['sdk_calls_per_s']} ratio={result['ratio']}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
