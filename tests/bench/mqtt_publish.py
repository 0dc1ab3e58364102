"""The daemon's MQTT publisher alone: CPU and time per message published to Mosquitto.

    python tests/bench/mqtt_publish.py [--messages 4000] [--rounds 3] [--json OUT]

``MqttPublisher`` (``orchestrator/adapters/events.py``, QoS 1, windows of 32) publishes
``--messages`` replies of about 400 bytes over 200 groups' topics to a Mosquitto of its own on a
free local port, once with ``set_tcp_nodelay true`` (as ``compose.yaml``'s ``mosquitto.conf``)
and once without (Mosquitto's default), ``--rounds`` times each after one message to warm up;
each round ends when every message is acknowledged. Prints a table (the least CPU of the
rounds, the median time), writes JSON with ``--json``, and ends with
``cpu_us_per_publish=… us_per_publish=…`` (with ``set_tcp_nodelay``). Needs ``mosquitto``
(Debian: ``apt install mosquitto``); without it, says so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.adapters.events import MqttPublisher  # noqa: E402
from tests.bench.daemon_env import dead_port  # noqa: E402
from tests.mosquitto import mosquitto_executable, running_mosquitto  # noqa: E402

PAYLOAD = json.dumps({"type": "reply", "text": "x" * 330, "group": "g1"}).encode()
CONFIGS = {"set_tcp_nodelay true": "set_tcp_nodelay true\n", "Mosquitto's default": ""}


async def _rounds(url: str, messages: int, rounds: int) -> list[tuple[float, float]]:
    """(CPU µs, wall µs) per message of each round."""
    publisher = MqttPublisher(url)
    task = asyncio.create_task(publisher.run())
    try:
        publisher.publish("arena/bench/warm", b"{}")
        if not await publisher.flush(30):
            raise RuntimeError("the publisher did not reach Mosquitto")
        results = []
        for _ in range(rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            for n in range(messages):
                publisher.publish(f"arena/groups/g{n % 200}/messages", PAYLOAD)
            if not await publisher.flush(300):
                raise RuntimeError("not every message was acknowledged")
            spent = time.process_time() - cpu, time.perf_counter() - wall
            results.append((spent[0] / messages * 1e6, spent[1] / messages * 1e6))
        return results
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    executable = mosquitto_executable()
    if executable is None:
        print("SKIPPED: mosquitto is not installed (apt install mosquitto)")
        return 0
    table: dict[str, dict[str, float]] = {}
    for label, option in CONFIGS.items():
        with tempfile.TemporaryDirectory() as folder:
            options = "allow_anonymous true\n" + option
            port = dead_port()
            with running_mosquitto(executable, port, Path(folder), options, 30.0) as url:
                results = uvloop.run(_rounds(url, args.messages, args.rounds))
        table[label] = {
            "cpu_us_per_publish": round(min(cpu for cpu, _ in results), 1),
            "us_per_publish": round(statistics.median(wall for _, wall in results), 1),
        }
    machine = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"MQTT publisher, {args.messages} messages x {args.rounds} rounds, QoS 1 ({machine})")
    print(f"{'Mosquitto':<22} {'CPU µs/msg':>11} {'µs/msg':>9}")
    for label, row in table.items():
        print(f"{label:<22} {row['cpu_us_per_publish']:>11.1f} {row['us_per_publish']:>9.1f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": table}, indent=2))
    best = table["set_tcp_nodelay true"]
    print(
        f"cpu_us_per_publish={best['cpu_us_per_publish']} us_per_publish={best['us_per_publish']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
