"""How long each ``arena`` command that reads takes to answer, against a running arena: warm
(answered by ``arena up``'s command server, as by default) and cold (``ARENA_CLI_SERVER=false``:
the command starts and imports everything itself, as without ``arena up``).

    python tests/bench/cli_latency.py [--runs N] [--instructions] [--json OUT] [--keep]

In a temporary folder one ``arena up`` runs on the embedded stack (the offline model; Redis on
its socket only, MQTT on a free port, no console), and a few messages are posted to the group
``demo`` with ``arena post … --wait``, so that there is history, memories and a daily log to
read. Each command below is then run N (5) times as a person runs it, the ``arena`` script of
this environment in a process of its own, after one untimed run (which leaves Python's bytecode
cache as an installed package has it: ``PYTHONDONTWRITEBYTECODE`` is dropped from the
commands' environment). Timed from start to exit; ``tail`` from start to its "following" line.
The CPU time is the ``arena`` process's own (user + system, from ``getrusage``), given for
the cold runs: on a busy machine it says what the command costs while the wall time also
counts the wait for a core (a warm command's work is done by the server's child, which it
does not count).

``--instructions`` also runs each command (``tail`` aside) cold once under Valgrind's cachegrind
and reports the instructions it executed, in billions: unlike times on a shared machine, the
same code gives the same count run after run, so it compares two versions of the code.

Prints a table (warm: median and best wall time; cold: median wall and CPU time; target
0.5 s) and ends with one line ``slowest=… slowest_median_s=… over_target=…
cold_slowest_median_s=…`` (the warm figures first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.daemon_env import copy_workspaces, dead_port, stop_arena  # noqa: E402
from tests.waiting import block_until  # noqa: E402

Sample = tuple[float, float, int]  # wall seconds, CPU seconds, exit code
TARGET_S = 0.5
READY_TIMEOUT_S = 120.0
POSTS = (
    "@architect we decided to use JWT, please design the token schema",
    "@developer please add a health check",
    "@tester what should we test first?",
)
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("history", "demo"),
    ("status",),
    ("status", "--json"),
    ("dead-letters",),
    ("jobs",),
    ("budget",),
    ("route", "@architect how should we store tokens?"),
    ("memory", "list"),
    ("memory", "search", "JWT"),
    ("memory", "stats"),
    ("memory", "show", "1"),
    ("growth", "architect"),
    ("logs", "architect"),
    ("summary", "demo"),
    ("context", "architect", "demo"),
    ("check",),
)


def arena_argv() -> list[str]:
    """The ``arena`` script next to this Python, as a person runs it (else ``-m``)."""
    script = Path(sys.executable).with_name("arena")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator"]


@contextlib.contextmanager
def arena_up(folder: Path) -> Iterator[dict[str, str]]:
    """``arena up`` on ``folder``; the environment its commands are run with."""
    unset = {"PYTHONDONTWRITEBYTECODE", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"}
    unset |= {"REDIS_URL", "MQTT_URL", "DATABASE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in unset and not k.startswith("ARENA_")}
    env.update(
        ARENA_DATA_DIR=str(folder / "data"),
        ARENA_WORKSPACES_DIR=str(folder / "workspaces"),
        ARENA_REDIS_PORT="0",
        ARENA_MQTT_PORT=str(dead_port()),  # free: the embedded broker listens there
        ARENA_WEB_PORT="0",
        ARENA_WORKERS="1",
    )
    copy_workspaces(folder / "workspaces")
    log_path = folder / "arena-up.log"
    with log_path.open("w") as log:
        up = subprocess.Popen(
            [*arena_argv(), "up"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            listening = folder / "data" / "cli.sock"  # the command server, once it is warm

            def ready() -> bool:
                if up.poll() is not None:
                    raise SystemExit(f"arena up did not start:\n{log_path.read_text()}")
                return "arena: ready" in log_path.read_text() and listening.exists()

            block_until(ready, timeout_s=READY_TIMEOUT_S, what="arena up to be ready")
            yield env
        finally:
            stop_arena(up, timeout_s=30)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(args: Sequence[str], env: dict[str, str]) -> Sample:
    """One run of ``arena ARGS``: wall seconds, CPU seconds, exit code."""
    cpu = _children_cpu_s()
    began = time.perf_counter()
    done = subprocess.run(
        [*arena_argv(), *args], cwd=REPO, env=env, capture_output=True, check=False
    )
    wall = time.perf_counter() - began
    if done.returncode not in (0, 1):
        raise SystemExit(f"arena {' '.join(args)}: exit {done.returncode}: {done.stderr!r}")
    return wall, _children_cpu_s() - cpu, done.returncode


def tail_once(env: dict[str, str]) -> Sample:
    """``arena tail demo`` from start to its "following" line, then stopped as Ctrl-C does."""
    cpu = _children_cpu_s()
    began = time.perf_counter()
    tail = subprocess.Popen(
        [*arena_argv(), "tail", "demo"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert tail.stderr is not None
    line = tail.stderr.readline()
    wall = time.perf_counter() - began
    tail.send_signal(signal.SIGINT)
    code = tail.wait(timeout=30)
    if "following group demo" not in line:
        raise SystemExit(f"arena tail did not start: {line!r}")
    return wall, _children_cpu_s() - cpu, code


def instructions(args: Sequence[str], env: dict[str, str]) -> float | None:
    """Billions of instructions ``arena ARGS`` executes, counted by cachegrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    counting = [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    done = subprocess.run(
        [*counting, *arena_argv(), *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    return int(match.group(1).replace(",", "")) / 1e9 if match else None


def _runner(command: Sequence[str], env: dict[str, str]) -> Callable[[], Sample]:
    return lambda: run_once(command, env)


def _cold(env: dict[str, str]) -> dict[str, str]:
    return {**env, "ARENA_CLI_SERVER": "false"}


def measure(name: str, runs: int, once: Callable[[], Sample]) -> dict[str, Any]:
    """``once()`` untimed, then ``runs`` times."""
    once()
    samples = [once() for _ in range(runs)]
    walls = [s[0] for s in samples]
    cpus = [s[1] for s in samples]
    return {
        "command": name,
        "wall_median_s": statistics.median(walls),
        "wall_best_s": min(walls),
        "cpu_median_s": statistics.median(cpus),
        "exit_codes": sorted({s[2] for s in samples}),
        "walls_s": [round(w, 3) for w in walls],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with valgrind too"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="arena-cli-"))
    rows: list[dict[str, Any]] = []
    try:
        with arena_up(folder) as env:
            for text in POSTS:
                run_once(["post", "demo", text, "--wait", "30"], env)
            for command in COMMANDS:
                row = measure(" ".join(command), args.runs, _runner(command, env))
                row["cold"] = measure("", args.runs, _runner(command, _cold(env)))
                if args.instructions:
                    row["instructions_g"] = instructions(command, _cold(env))
                rows.append(row)
            row = measure("tail demo (start)", args.runs, lambda: tail_once(env))
            row["cold"] = measure("", args.runs, lambda: tail_once(_cold(env)))
            rows.append(row)
    finally:
        if args.keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"arena read commands, {args.runs} runs each (target {TARGET_S} s)")
    print(f"  {'':<42} {'warm':>17}   {'cold (no command server)':>32}")
    head = ("command", "median", "best", "median", "cpu", "instr")
    print(f"  {head[0]:<42} {head[1]:>8} {head[2]:>8}   {head[3]:>8} {head[4]:>8} {head[5]:>7}")
    for row in rows:
        mark = "" if row["wall_median_s"] <= TARGET_S else "  over"
        counted = row.get("instructions_g")
        instr = f"{counted:>6.2f}G" if counted is not None else f"{'-':>7}"
        cold = row["cold"]
        print(
            f"  {row['command'][:42]:<42} {row['wall_median_s']:>7.3f}s "
            f"{row['wall_best_s']:>7.3f}s   {cold['wall_median_s']:>7.3f}s "
            f"{cold['cpu_median_s']:>7.3f}s {instr}{mark}"
        )
    slowest = max(rows, key=lambda row: row["wall_median_s"])
    cold_slowest = max(row["cold"]["wall_median_s"] for row in rows)
    over = sum(1 for row in rows if row["wall_median_s"] > TARGET_S)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"runs": args.runs, "target_s": TARGET_S, "commands": rows}
        args.json.write_text(json.dumps(report, indent=2))
    print(
        f"slowest={slowest['command'].replace(' ', '_')} "
        f"slowest_median_s={slowest['wall_median_s']:.3f} over_target={over} "
        f"cold_slowest_median_s={cold_slowest:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
