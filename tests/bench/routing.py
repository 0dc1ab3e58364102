"""Routing speed: the classifier's decision time with 4 and 12 agents.

    python tests/bench/routing.py [--rounds N] [--json OUT]

Prints a table, writes JSON with --json, and ends with one line
``routing_median_us=… routing_p95_us=…`` (12 agents).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from orchestrator.core.agents import load_agents
from orchestrator.core.models import AgentSpec, RoutingRule
from orchestrator.core.routing import route

REPO = Path(__file__).resolve().parents[2]
TEXTS = [
    "nothing in particular, just wondering what the weather will be like later today",
    "请帮我看看这个系统的整体结构应该怎么调整比较好 谢谢",
    "could someone look at thing7 when there is time",
    "@architect we decided to use JWT, please design the token schema",
    "the latest build seems fine " * 20,
]


def _extra_agents(n: int) -> tuple[AgentSpec, ...]:
    return tuple(
        AgentSpec(
            id=f"agent{i}",
            name=f"Agent {i}",
            role="extra",
            model="m",
            rules=(
                RoutingRule(agents=(f"agent{i}",), keywords=(f"topic{i}", f"主题{i}"), priority=i),
                RoutingRule(agents=(f"agent{i}",), patterns=(rf"\bthing{i}\b",), priority=i),
            ),
        )
        for i in range(n)
    )


def _measure(agents: tuple[AgentSpec, ...], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        for text in TEXTS:
            start = time.perf_counter()
            route(text, agents)
            samples.append((time.perf_counter() - start) * 1e6)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    shipped = load_agents(REPO / "agents")
    results = {}
    for label, agents in (("4 agents", shipped), ("12 agents", shipped + _extra_agents(8))):
        samples = sorted(_measure(agents, args.rounds))
        results[label] = {
            "median_us": statistics.median(samples),
            "p95_us": samples[int(len(samples) * 0.95)],
            "calls": len(samples),
        }
    machine = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"routing decision time ({machine})")
    print(f"{'agents':<10} {'median µs':>10} {'p95 µs':>10} {'calls':>8}")
    for label, row in results.items():
        print(f"{label:<10} {row['median_us']:>10.1f} {row['p95_us']:>10.1f} {row['calls']:>8}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    top = results["12 agents"]
    print(f"routing_median_us={top['median_us']:.1f} routing_p95_us={top['p95_us']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
