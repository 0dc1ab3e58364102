"""The CPU one message costs the daemon's pipeline, in this process, without Redis or MQTT.

    python tests/bench/turn_cpu.py [--messages 2000] [--groups 200] [--agents 4]
        [--rounds 5] [--collector daemon|python] [--first-turns] [--instructions] [--json OUT]

The realistic workload of ``throughput.py --realistic`` (20 stored messages, 50 session
memories, 2 of them pinned, per group; personal logs of today), stored the same way; then the
daemon's pipeline, wired as ``arena daemon`` wires it (``runtime.daemon.build_pipeline``: the
cache of recent messages, the memory writer; the offline model), answers ``--messages``
person's messages spread over the groups, each mentioning one agent, in waves of one message
per group at once (as the daemon has them in flight, its writes batched across groups),
``--rounds`` times over fresh copies of the data. What is published goes to lists in memory:
the figure leaves out the Redis streams and MQTT, which ``throughput.py`` measures end to end.

Each group's first turn (which reads the group and loads its memories from the database) is
left out of the clock, unless ``--first-turns``: then the ``--messages`` begin with one per
group, in a fresh pipeline, as ``throughput.py`` counts them in a fresh daemon.

The garbage collector is settled as the daemon settles it (``--collector python``: Python's
own settings); the table says how much of the CPU it took. Process CPU time per message moves
less than the end-to-end rate on a noisy machine; the least of the rounds is the figure.
Prints a table, writes JSON with ``--json``, and ends with ``cpu_us_per_message=…``.

``--instructions`` counts instructions instead of CPU time: the bench runs once more under
valgrind's callgrind (Debian: ``apt install valgrind``), counting only while the clocked waves
run. The count hardly moves from run to run (1 to 2 %), where CPU time on a shared machine
moves by tens of percent: compare commits with it (one round, a few hundred messages: it runs
about fifty times slower). Ends with ``instructions_per_message=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import (  # noqa: E402  (the bench's own setup, shared)
    PERSON_TEXTS,
    REALISTIC_MEMORIES,
    _fill_history,
    _fill_logs,
    _fill_memories,
    _write_agents,
)

from orchestrator.adapters.providers import build_llm  # noqa: E402
from orchestrator.cli.serve import settle_collector  # noqa: E402
from orchestrator.core.models import ChatMessage, MessageKind  # noqa: E402
from orchestrator.core.wire import Outbound  # noqa: E402
from orchestrator.memory.conversation.recent import RecentMessages  # noqa: E402
from orchestrator.memory.db import make_engine  # noqa: E402
from orchestrator.runtime.daemon import build_pipeline  # noqa: E402
from orchestrator.runtime.wiring import Wiring  # noqa: E402
from orchestrator.settings import load_settings  # noqa: E402

HISTORY = 20  # stored messages per group, as throughput.py --realistic --history 20
_UNDER_CALLGRIND = "ARENA_BENCH_UNDER_CALLGRIND"  # set for the run under valgrind


def _count_instructions(on: bool) -> None:
    """Switch callgrind's counting on or off (when this process runs under it)."""
    if os.environ.get(_UNDER_CALLGRIND):
        subprocess.run(
            ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
            capture_output=True,
            check=False,
        )


class _Outbox:
    def __init__(self) -> None:
        self.items = 0

    async def publish_all(self, items: Sequence[Outbound]) -> int:
        self.items += len(items)
        return len(items)


class _Events:
    def __init__(self) -> None:
        self.events = 0

    def publish(self, topic: str, payload: bytes) -> None:
        self.events += 1


def _prepare(folder: Path, groups: list[str], agents: int) -> None:
    (folder / "data").mkdir()
    _write_agents(folder, agents)
    _fill_history(folder / "data" / "arena.db", groups, HISTORY, agents)
    _fill_memories(folder / "data" / "arena.db", groups, agents)
    _fill_logs(folder / "workspaces", agents)


async def _answer_all(
    folder: Path,
    groups: list[str],
    agents: int,
    messages: int,
    collector: str,
    first_turns: bool,
) -> tuple[float, float]:
    """Answer ``messages`` messages; the process CPU seconds it took (the first message of
    each group, which reads the group from the database, outside the clock), and the part of
    them the garbage collector took."""
    if collector == "daemon":
        settle_collector()
    settings = load_settings(
        agents_dir=folder / "agents",
        workspaces_dir=folder / "workspaces",
        data_dir=folder / "data",
        prompts_dir=REPO / "prompts",
    )
    engine = make_engine(f"sqlite:///{folder / 'data' / 'arena.db'}")
    wiring = Wiring(settings, engine)
    recent = RecentMessages(wiring.history, settings.history_limit, verify=False)
    pipeline = build_pipeline(
        wiring, outbox=_Outbox(), events=_Events(), llm=build_llm(settings), recent=recent
    )
    start = datetime.now(UTC)

    def message(n: int) -> ChatMessage:
        group = groups[n % len(groups)]
        text = PERSON_TEXTS[n % len(PERSON_TEXTS)]
        return ChatMessage(
            id=f"turn-{n}",
            group=group,
            sender="alex",
            kind=MessageKind.HUMAN,
            text=f"@agent{n % agents} {text}",
            created_at=start + timedelta(milliseconds=n),
        )

    async def wave(first: int, count: int) -> None:
        # One message per group at once, as the daemon has them in flight: its writes are
        # batched across groups as the daemon's are.
        await asyncio.gather(*(pipeline.handle(message(n)) for n in range(first, first + count)))

    collecting = [0.0, 0.0]  # the collector's CPU so far, and when it last started

    def timed(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            collecting[1] = time.thread_time()
        else:
            collecting[0] += time.thread_time() - collecting[1]

    try:
        skipped = 0 if first_turns else len(groups)
        if not first_turns:
            await wave(0, len(groups))  # each group read once, outside the clock
        gc.callbacks.append(timed)
        _count_instructions(True)
        began = time.process_time()
        for at in range(skipped, skipped + messages, len(groups)):
            await wave(at, min(len(groups), skipped + messages - at))
        spent = time.process_time() - began
        _count_instructions(False)
        return spent, collecting[0]
    finally:
        if timed in gc.callbacks:
            gc.callbacks.remove(timed)
        engine.dispose()


def measure(
    messages: int,
    groups: int,
    agents: int,
    rounds: int,
    collector: str,
    first_turns: bool = False,
) -> dict[str, Any]:
    names = [f"g{n}" for n in range(groups)]
    with tempfile.TemporaryDirectory(prefix="arena-turn-cpu-") as tmp:
        seed = Path(tmp) / "seed"
        seed.mkdir()
        _prepare(seed, names, agents)
        per_message: list[float] = []
        collected: list[float] = []
        for r in range(rounds):
            folder = Path(tmp) / f"round{r}"
            shutil.copytree(seed, folder)
            cpu, gc_cpu = asyncio.run(
                _answer_all(folder, names, agents, messages, collector, first_turns)
            )
            per_message.append(cpu / messages * 1e6)
            collected.append(gc_cpu / messages * 1e6)
            print(
                f"round {r + 1}/{rounds}: {per_message[-1]:.0f} us/message, "
                f"{collected[-1]:.0f} of them collecting garbage",
                file=sys.stderr,
            )
            shutil.rmtree(folder)
    return {
        "messages": messages,
        "groups": groups,
        "agents": agents,
        "memories_per_group": REALISTIC_MEMORIES,
        "history_per_group": HISTORY,
        "collector": collector,
        "first_turns": first_turns,
        "rounds_us": [round(v, 1) for v in per_message],
        "rounds_gc_us": [round(v, 1) for v in collected],
        "cpu_us_min": round(min(per_message), 1),
        "cpu_us_median": round(statistics.median(per_message), 1),
    }


def _instructions(args: argparse.Namespace) -> int:
    """Run this bench once under callgrind; print the instructions per message."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("--instructions needs valgrind (Debian: apt install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="arena-callgrind-") as tmp:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={Path(tmp) / 'callgrind.out'}",
            sys.executable,
            __file__,
            *(["--messages", str(args.messages), "--groups", str(args.groups)]),
            *(["--agents", str(args.agents), "--rounds", "1", "--collector", args.collector]),
            *(["--first-turns"] if args.first_turns else []),
        ]
        print(f"counting instructions under callgrind: {args.messages} messages", file=sys.stderr)
        done = subprocess.run(
            command,
            env={**os.environ, _UNDER_CALLGRIND: "1"},
            capture_output=True,
            text=True,
            check=False,
        )
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        print(done.stderr[-2000:], file=sys.stderr)
        print("the run under callgrind failed", file=sys.stderr)
        return 1
    per_message = int(found.group(1)) / args.messages
    firsts = ", first turns counted" if args.first_turns else ""
    print(f"turn instructions, realistic workload, pipeline in process (callgrind{firsts})")
    print(f"{'messages':>9} {'groups':>7} {'agents':>7} {'instructions_per_message':>25}")
    print(f"{args.messages:>9} {args.groups:>7} {args.agents:>7} {per_message:>25.0f}")
    if args.json:
        report = {
            "messages": args.messages,
            "groups": args.groups,
            "agents": args.agents,
            "first_turns": args.first_turns,
            "instructions_per_message": round(per_message),
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"instructions_per_message={per_message:.0f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--collector",
        choices=["daemon", "python"],
        default="daemon",
        help="the garbage collector as the daemon settles it (default) or Python's own",
    )
    parser.add_argument(
        "--first-turns",
        action="store_true",
        help="count each group's first turn too, as throughput.py does in a fresh daemon",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions under valgrind's callgrind instead of CPU time (steady)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if min(args.messages, args.groups, args.agents, args.rounds) < 1:
        parser.error("--messages, --groups, --agents and --rounds must be at least 1")
    if args.instructions:
        return _instructions(args)
    report = measure(
        args.messages, args.groups, args.agents, args.rounds, args.collector, args.first_turns
    )
    gc_us = statistics.median(report["rounds_gc_us"])
    firsts = ", first turns counted" if args.first_turns else ""
    print(f"turn CPU, realistic workload, pipeline in process (no Redis, no MQTT{firsts})")
    print(
        f"{'messages':>9} {'groups':>7} {'agents':>7} {'collector':>9} {'min_us':>8} "
        f"{'median_us':>10} {'gc_us':>7}"
    )
    print(
        f"{report['messages']:>9} {report['groups']:>7} {report['agents']:>7} "
        f"{report['collector']:>9} {report['cpu_us_min']:>8.0f} "
        f"{report['cpu_us_median']:>10.0f} {gc_us:>7.0f}"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"cpu_us_per_message={report['cpu_us_min']:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
