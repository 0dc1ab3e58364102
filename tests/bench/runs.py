"""What the arena adds to a Claude Code run, and whether the room stays live while runs go on.

    python tests/bench/runs.py [--runs N] [--in-flight R] [--messages M] [--groups G]
        [--cycles C] [--json OUT] [--keep]

In a temporary folder one ``arena up`` runs offline on the embedded stack (Redis on a free
port, MQTT on another, no console, ``ARENA_RUN_WORKERS=R``), with the repository's team and a
``coder`` agent (``runtime: claude-code``, an editor, acting on "create" and "check"), on a
shared project of its own (``ARENA_PROJECT_DIR``). Each run's model is the offline coder served
by the run's own ``MessagesApiServer``, answering at once. The ``claude`` the runs start
(``ARENA_CLAUDE_CLI``) is a stand-in that runs the real bundled CLI and notes the time each
line of its output left it (and the command line, environment and prompt it was given).

1. What the arena adds to a run. N times, one at a time, "@coder create fileK.py that prints
   K" is posted (``ArenaClient.post``) and its reply awaited, after one such run not counted
   (the run workers finish starting after ``arena up`` says it is ready). From the Redis entry
   ids (the message, the run card, each step on ``arena:group:{g}:steps``, the reply), the
   run's row (claimed, ended) and the stand-in's notes, per run:

       post → card          the message taken, the turn decided to run, the card published
       card → claimed       a run worker took the job (RQ forks a work horse for it)
       claimed → CLI        the checkout, the context, the caps, the SDK and the launcher
       CLI                  the CLI from its start to its result line, in the arena
       result → ended       the CLI's exit, the caps settled, the commit, the daily log
       ended → reply        the run's end back through the inbound stream, the reply
       card → first step, last step → reply, total (post → reply)

   After each, the same CLI run alone: the command line the arena's run was given (so the
   flags ``orchestrator/adapters/claude_code.py`` builds) with ``-p`` and the same prompt in
   place of the SDK's stdin, its environment (less what the SDK adds), a clone of the project,
   against a ``MessagesApiServer`` of this process, timed from start to its result line. Both
   go through the stand-in, so its own few milliseconds cancel out. overhead = total - alone,
   per run. Per step: the time from the CLI writing it to it being on the steps stream (Redis
   entry id, ms), split at the moment the run worker had it (the step's ``at``, taken before
   it is kept in the database and published).

2. The room stays live. M messages to a plain agent ("@architect …", G new groups) are
   posted at once with one pipeline, and the rate is M over the time from the first post to
   the last ``done`` item (Redis entry ids): first with no run in flight, then C times (2) with
   R runs in flight and without again, once they are cancelled (``arena run cancel``; each
   chat in new groups, so that every one starts from the same history). The runs in flight are
   R messages "@coder check slow.py", each in a group of its own: the real CLI runs a script
   that sleeps, so each run stays running, waiting as it would on a slow model; the chat starts
   once every run shows its Bash step, and 3 s later (each CLI has then finished starting).
   Each rate with runs is set against the mean of the two without either side of it (the
   machine's load drifts; the two bracket it), and the ratio is the mean of those. Beside
   each rate: the daemon's CPU per message (``arena up``'s own process, from ``/proc``): what
   a message costs it, however long it waited for a core; and the cores taken meanwhile by
   the daemon, by the rest of the arena (Redis, the workers, the runs and all they started)
   and by everything else on the machine (this script included). Target: the rate with runs
   within 10 % of the rate without.

Prints the tables and ends with one line ``run_overhead_p50_ms=… run_overhead_p95_ms=…
chat_ratio_with_runs=…``. Never asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.adapters.claude_code import bundled_cli  # noqa: E402
from orchestrator.adapters.messages_api import MessagesApiServer  # noqa: E402
from orchestrator.adapters.process_group import SDK_VARIABLES  # noqa: E402
from orchestrator.client import ArenaClient  # noqa: E402
from orchestrator.core.coding import steps_stream  # noqa: E402
from orchestrator.core.wire import inbox_stream, outbox_stream  # noqa: E402
from orchestrator.memory.db import make_engine  # noqa: E402
from orchestrator.memory.runs import RunStore  # noqa: E402
from orchestrator.runtime.run_job import git_run_id  # noqa: E402
from tests.arena_up import acting_agent  # noqa: E402
from tests.bench.daemon_env import (  # noqa: E402  # noqa: E402
    check_running,
    copy_workspaces,
    dead_port,
    start_arena,
    stop_arena,
)
from tests.waiting import block_until  # noqa: E402

GROUP = "bench"
READY_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 120.0
SETTLE_S = 3.0
SLOW = "import time\n\ntime.sleep(600)\n"  # the Bash tool's own limit (2 min) comes first
# The `claude` the arena starts: the real CLI, its output passed on line by line, noting when
# each line left it and how many steps it holds (as orchestrator.adapters.claude_code counts
# them), and what it was given (command line, environment, working directory, the prompt the
# SDK writes on its standard input), in cli.jsonl beside its configuration folder.
STAND_IN = """#!{python} -S
import json, os, subprocess, sys, threading, time

began = time.time()
folder = os.path.dirname(os.environ["CLAUDE_CONFIG_DIR"])
notes, lock = open(os.path.join(folder, "cli.jsonl"), "a"), threading.Lock()
STEPS = {{"assistant": ("tool_use", "text"), "user": ("tool_result",)}}


def note(**fields):
    with lock:
        notes.write(json.dumps(fields) + "\\n")
        notes.flush()


def read(line):
    try:
        item = json.loads(line)
    except ValueError:
        return {{}}
    return item if isinstance(item, dict) else {{}}


def steps(item):
    content = (item.get("message") or {{}}).get("content")
    wanted = STEPS.get(item.get("type"), ())
    if not isinstance(content, list):
        return 0
    return sum(
        1
        for block in content
        if block.get("type") in wanted and (block["type"] != "text" or block["text"].strip())
    )


def pump(child):
    asked = False
    for line in sys.stdin.buffer:
        item = read(line)
        if not asked and item.get("type") == "user":
            asked = True
            note(event="prompt", text=item["message"]["content"])
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()


note(event="start", t=began, argv=sys.argv[1:], cwd=os.getcwd(), env=dict(os.environ))
child = subprocess.Popen([{cli!r}, *sys.argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
threading.Thread(target=pump, args=(child,), daemon=True).start()
for line in child.stdout:
    at = time.time()
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
    item = read(line)
    note(event="line", t=at, kind=item.get("type", ""), steps=steps(item))
code = child.wait()
note(event="exit", t=time.time(), code=code)
sys.exit(code)
"""


def _ms(entry_id: str | bytes) -> float:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return float(text.split("-", 1)[0])


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


class Bench:
    """``arena up`` on a temporary folder, and what the benchmark reads of it."""

    def __init__(self, folder: Path, workers: int) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.project = folder / "project"
        self.cli = bundled_cli()
        if self.cli is None:
            raise SystemExit("no claude CLI: install claude-agent-sdk (make .venv)")
        stand_in = folder / "claude"
        stand_in.write_text(STAND_IN.format(python=sys.executable, cli=str(self.cli)))
        stand_in.chmod(0o755)
        self.stand_in = stand_in
        agents = folder / "agents"
        agents.mkdir()
        for path in (REPO / "agents").glob("*.yaml"):
            shutil.copy2(path, agents / path.name)
        acting_agent(agents, "coder", "developer", "editor", ["create", "check"])
        copy_workspaces(folder / "workspaces")
        port = dead_port()
        unset = {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "REDIS_URL", "MQTT_URL", "DATABASE_URL"}
        self.env = {k: v for k, v in os.environ.items() if k not in unset | {"PYTHONPATH"}}
        self.env = {k: v for k, v in self.env.items() if not k.startswith("ARENA_")}
        self.env.update(
            ARENA_DATA_DIR=str(self.data),
            ARENA_AGENTS_DIR=str(agents),
            ARENA_WORKSPACES_DIR=str(folder / "workspaces"),
            ARENA_PROMPTS_DIR=str(REPO / "prompts"),
            ARENA_PROJECT_DIR=str(self.project),
            ARENA_CLAUDE_CLI=str(stand_in),
            ARENA_RUN_WORKERS=str(workers),
            ARENA_REDIS_PORT=str(port),
            ARENA_MQTT_PORT=str(dead_port()),
            ARENA_WEB_PORT="0",
            ARENA_WORKERS="1",
            PYTHONUNBUFFERED="1",
        )
        self.url = f"redis://127.0.0.1:{port}/0"
        self.log = folder / "arena-up.log"
        self.up: subprocess.Popen[bytes] | None = None
        self.redis: redis.Redis = redis.Redis.from_url(self.url)
        self.client: ArenaClient | None = None

    def start(self) -> None:
        self.up = start_arena("up", self.env, self.log)
        up = self.up

        def ready() -> bool:
            check_running(up, self.log, "arena up")
            return "arena: ready" in self.log.read_text(errors="replace")

        block_until(ready, timeout_s=READY_TIMEOUT_S, what="arena up to be ready")
        self.client = ArenaClient(self.url)

    def stop(self) -> list[int]:
        """Stop ``arena up``; the pids of anything of the folder's left after it (killed)."""
        if self.client is not None:
            self.client.close()
        self.redis.close()
        if self.up is not None:
            stop_arena(self.up, timeout_s=30)
        left = [pid for pid in _processes_of(self.folder) if pid != os.getpid()]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left

    def post(self, group: str, text: str) -> str:
        assert self.client is not None
        return self.client.post(group, text)

    def item_ms(self, group: str, item_id: str, after: str, timeout_s: float) -> float:
        """When the outbound item ``item_id`` of ``group`` was published (its entry's time)."""
        stream, deadline = outbox_stream(group), time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.up is not None
            check_running(self.up, self.log, "arena up")
            for _stream, entry_id, fields in self.read({stream: after}):
                after = entry_id
                if fields.get("id") == item_id:
                    return _ms(entry_id)
        raise RuntimeError(f"no {item_id} in {group} within {timeout_s:g}s (see {self.log})")

    def steps(self, group: str, run_id: str) -> list[tuple[float, dict[str, str]]]:
        """The run's steps on the group's steps stream: entry time, fields."""
        entries: Any = self.redis.xrange(steps_stream(group))
        return [
            (_ms(entry_id), fields)
            for entry_id, fields in ((i, _decoded(raw)) for i, raw in entries)
            if fields.get("run") == run_id
        ]

    def read(self, cursors: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
        """What the streams gained after their cursors, waiting up to half a second: stream,
        entry id, fields."""
        response: Any = self.redis.xread(dict(cursors), block=500)  # type: ignore[arg-type]
        return [
            (stream.decode(), entry_id.decode(), _decoded(raw))
            for stream, entries in response or []
            for entry_id, raw in entries
        ]

    def notes(self, run_id: str) -> list[dict[str, Any]]:
        """What the stand-in noted of the run's CLI."""
        path = self.data / "runs" / git_run_id(run_id) / "cli.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    def newest(self, group: str) -> str:
        last: Any = self.redis.xrevrange(outbox_stream(group), count=1)
        return last[0][0].decode() if last else "0-0"


def _decoded(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def _processes_of(folder: Path) -> list[int]:
    """Live processes whose command line or environment names ``folder``."""
    wanted, found = os.fsencode(str(folder)), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
                if wanted in seen and ") Z " not in (entry / "stat").read_text():
                    found.append(int(entry.name))
    return found


# ------------------------------------------------------------------ 1. what a run costs


def one_run(bench: Bench, k: int) -> dict[str, Any]:
    """Post "@coder create fileK.py …" and take its run apart."""
    after = bench.newest(GROUP)
    message_id = bench.post(GROUP, f"@coder create file{k}.py that prints {k}")
    run_id = f"{message_id}:1:coder"
    card = bench.item_ms(GROUP, f"{run_id}:run", after, RUN_TIMEOUT_S)
    reply = bench.item_ms(GROUP, run_id, after, RUN_TIMEOUT_S)
    engine = make_engine(f"sqlite:///{bench.data / 'arena.db'}")
    try:
        run = RunStore(engine).get(run_id)
    finally:
        engine.dispose()
    if run is None or run.status != "done" or run.started_at is None or run.finished_at is None:
        raise RuntimeError(f"run {run_id} did not end well: {run}")
    notes = bench.notes(run_id)
    start = next(n for n in notes if n["event"] == "start")
    result = next(n for n in notes if n.get("kind") == "result")
    emitted = [n["t"] * 1000 for n in notes if n.get("steps") for _ in range(n["steps"])]
    steps = bench.steps(GROUP, run_id)
    kept = [datetime.fromisoformat(fields["at"]).timestamp() * 1000 for _, fields in steps]
    published = [ms for ms, _ in steps]
    if len(emitted) != len(published):
        raise RuntimeError(f"run {run_id}: {len(emitted)} steps written, {len(published)} shown")
    posted = _ms(message_id)
    return {
        "run": run_id,
        "post_card_ms": card - posted,
        "card_claimed_ms": run.started_at.timestamp() * 1000 - card,
        "claimed_cli_ms": start["t"] * 1000 - run.started_at.timestamp() * 1000,
        "cli_ms": (result["t"] - start["t"]) * 1000,
        "result_ended_ms": run.finished_at.timestamp() * 1000 - result["t"] * 1000,
        "ended_reply_ms": reply - run.finished_at.timestamp() * 1000,
        "card_first_step_ms": published[0] - card,
        "last_step_reply_ms": reply - published[-1],
        "total_ms": reply - posted,
        "steps": len(published),
        "step_kept_ms": [b - a for a, b in zip(emitted, kept, strict=True)],
        "step_shown_ms": [b - a for a, b in zip(emitted, published, strict=True)],
        "capture": {"argv": start["argv"], "env": start["env"], "cwd": start["cwd"],
                    "prompt": next(n["text"] for n in notes if n["event"] == "prompt")},
    }  # fmt: skip


def alone(bench: Bench, capture: dict[str, Any], where: Path, base_url: str) -> float:
    """The run's CLI by itself (``claude -p``, the same flags, prompt and environment, a clone
    of the project): ms from its start to its result line."""
    argv: list[str] = list(capture["argv"])
    checkout = argv[argv.index("--add-dir") + 1]
    project, workspace, config = where / "project", where / "workspace", where / "claude"
    subprocess.run(["git", "clone", "-q", str(bench.project), str(project)], check=True)
    workspace.mkdir()
    (config / "tmp").mkdir(parents=True)
    cut = argv.index("--input-format")
    argv = [a.replace(checkout, str(project)) for a in argv[:cut] + argv[cut + 2 :]]
    prompt = capture["prompt"].replace(checkout, str(project))
    env = {  # what the SDK adds is not the CLI's own
        k: v
        for k, v in capture["env"].items()
        if k not in SDK_VARIABLES and not k.startswith("CLAUDE_AGENT_SDK_")
    }
    env.update(HOME=str(config), CLAUDE_CONFIG_DIR=str(config), ANTHROPIC_BASE_URL=base_url)
    env.update(CLAUDE_CODE_TMPDIR=str(config / "tmp"), TMPDIR=str(config / "tmp"))
    env.update(PWD=str(workspace))
    began = time.time()
    cli = subprocess.Popen(
        [str(bench.stand_in), *argv, "-p", prompt],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=(config / "stderr.log").open("wb"),  # its notes, kept as the arena keeps them
    )
    assert cli.stdout is not None
    ended, result = None, {}
    for line in cli.stdout:
        if ended is None and (item := json.loads(line)).get("type") == "result":
            ended, result = time.time(), item
    if cli.wait() != 0 or ended is None or result.get("subtype") != "success":
        raise RuntimeError(f"the CLI alone failed (exit {cli.returncode}): {result}")
    return (ended - began) * 1000


# ------------------------------------------------------------------ 2. the room stays live


class Cpu:
    """CPU time taken meanwhile, in ms: by the daemon (``arena up``'s own process), by the
    rest of the arena (Redis, the workers, the runs and all they started) and by the machine
    in all (``/proc/stat``: other work on the machine included)."""

    def __init__(self, bench: Bench) -> None:
        assert bench.up is not None
        self.folder, self.daemon = bench.folder, bench.up.pid
        self.wall = time.monotonic()
        self.pids = self._pids()
        self.busy = _busy_ms()

    def _pids(self) -> dict[int, float]:
        found = {}
        for pid in _processes_of(self.folder):
            with contextlib.suppress(OSError, IndexError, ValueError):
                found[pid] = _cpu_ms(pid)
        return found

    def taken(self) -> dict[str, float]:
        """The cores each took on average since this started (1.0: one core all along)."""
        wall = (time.monotonic() - self.wall) * 1000
        now = self._pids()
        used = {pid: ms - self.pids.get(pid, 0.0) for pid, ms in now.items()}
        daemon = used.pop(self.daemon, 0.0)
        arena = daemon + sum(used.values())
        return {
            "daemon_ms": daemon,
            "daemon_cores": daemon / wall,
            "rest_cores": (arena - daemon) / wall,
            "others_cores": max(0.0, _busy_ms() - self.busy - arena) / wall,
        }


def _busy_ms() -> float:
    """The machine's CPU time not idle, all cores, since it started."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(ticks[:3]) + sum(ticks[5:8])  # user nice system, irq softirq steal
    return busy * 1000 / os.sysconf("SC_CLK_TCK")


def chat(bench: Bench, name: str, messages: int, groups: int, runs: int = 0) -> dict[str, Any]:
    """M messages to the architect over G new groups at once; their rate."""
    names = [f"chat-{name}-{g}" for g in range(groups)]
    pipe = bench.redis.pipeline(transaction=False)
    for n in range(messages):
        text = f"@architect how long should the refresh tokens live? ({n})"
        pipe.xadd(inbox_stream(), {"group": names[n % groups], "sender": "alex", "text": text})
    assert bench.up is not None
    cpu = Cpu(bench)
    posted = [_ms(entry) for entry in pipe.execute()]
    cursors = {outbox_stream(g): "0-0" for g in names}
    done: list[float] = []
    deadline = time.monotonic() + max(120.0, messages / 5)
    while len(done) < messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"chat {name}: {len(done)} of {messages} answered in time")
        check_running(bench.up, bench.log, "arena up")
        for stream, entry_id, fields in bench.read(cursors):
            cursors[stream] = entry_id
            if fields.get("type") == "done":
                done.append(_ms(entry_id))
    taken = cpu.taken()
    return {
        "phase": name,
        "runs": runs,
        "messages_per_s": messages / ((max(done) - min(posted)) / 1000),
        "daemon_cpu_ms": taken.pop("daemon_ms") / messages,
        **taken,
    }


def hold(bench: Bench, count: int, cycle: int) -> list[tuple[str, str]]:
    """Start ``count`` runs that stay running (the CLI runs a script that sleeps), each in a
    group of its own; once each shows its Bash step, their groups and ids."""
    if not (bench.project / "slow.py").exists():
        (bench.project / "slow.py").write_text(SLOW)
        git = ["git", "-C", str(bench.project), "-c", "user.name=alex", "-c", "user.email=a@x"]
        subprocess.run([*git, "add", "slow.py"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "a script that takes its time"], check=True)
    groups = [f"hold-{cycle}-{n}" for n in range(count)]
    runs = [(g, f"{bench.post(g, '@coder check slow.py')}:1:coder") for g in groups]

    def holding() -> bool:
        assert bench.up is not None
        check_running(bench.up, bench.log, "arena up")
        return all(
            any(f.get("tool") == "Bash" for _, f in bench.steps(group, run)) for group, run in runs
        )

    block_until(holding, timeout_s=READY_TIMEOUT_S, what=f"{count} runs to be running")
    time.sleep(SETTLE_S)  # each CLI finishes starting: the runs are then waiting, as on a model
    return runs


def release(bench: Bench, runs: Sequence[tuple[str, str]]) -> int:
    """``arena run cancel`` each run and wait for its reply; how many were still running."""
    running = 0
    for _group, run_id in runs:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "run", "cancel", run_id],
            cwd=REPO,
            env=bench.env,
            capture_output=True,
            text=True,
        )
        running += "is running" in done.stdout
    for group, run_id in runs:
        bench.item_ms(group, run_id, "0-0", RUN_TIMEOUT_S)
    return running


def measure_runs(bench: Bench, count: int) -> tuple[list[dict[str, Any]], list[float]]:
    """``count`` runs through the arena, each followed by its CLI alone (after one of each
    not counted: the run workers finish starting after ``arena up`` says it is ready)."""
    runs, alone_ms = [], []
    with MessagesApiServer() as server:
        for k in range(count + 1):
            runs.append(one_run(bench, k))
            where = bench.folder / f"alone-{k}"
            alone_ms.append(alone(bench, runs[-1]["capture"], where, server.base_url))
    return runs[1:], alone_ms[1:]


def measure_chat(
    bench: Bench, in_flight: int, cycles: int, messages: int, groups: int
) -> list[dict[str, Any]]:
    """The chat's rate without runs, then ``cycles`` times with ``in_flight`` runs and
    without again."""
    phases = [chat(bench, "1", messages, groups)]
    for cycle in range(1, cycles + 1):
        held = hold(bench, in_flight, cycle)
        phases.append(chat(bench, str(len(phases) + 1), messages, groups, in_flight))
        phases[-1]["runs"] = release(bench, held)  # those still running at its end
        phases.append(chat(bench, str(len(phases) + 1), messages, groups))
    return phases


# ------------------------------------------------------------------------------- report


def _row(name: str, values: Sequence[float]) -> str:
    median, p95 = statistics.median(values), _pct(values, 0.95)
    return f"  {name:<34} {median:>9.0f} {p95:>9.0f}"


def _against(three: Sequence[dict[str, Any]], key: str) -> float:
    """The middle phase's figure over the mean of the two either side of it."""
    before, busy, after = three
    return float(busy[key] * 2 / (before[key] + after[key]))


def report(runs: list[dict[str, Any]], alone_ms: list[float], phases: list[dict[str, Any]]) -> str:
    overhead = [r["total_ms"] - a for r, a in zip(runs, alone_ms, strict=True)]
    print(f"\na run through the arena, {len(runs)} runs one at a time (ms)")
    print(f"  {'':<34} {'median':>9} {'p95':>9}")
    for key, name in (
        ("post_card_ms", "post → card"),
        ("card_claimed_ms", "card → claimed by a run worker"),
        ("claimed_cli_ms", "claimed → CLI started"),
        ("cli_ms", "CLI start → result, in the arena"),
        ("result_ended_ms", "result → run ended"),
        ("ended_reply_ms", "run ended → reply"),
        ("card_first_step_ms", "card → first step"),
        ("last_step_reply_ms", "last step → reply"),
        ("total_ms", "total: post → reply"),
    ):
        print(_row(name, [r[key] for r in runs]))
    print(_row("the CLI alone: start → result", alone_ms))
    print(_row("overhead: total - alone", overhead))
    kept = [ms for r in runs for ms in r["step_kept_ms"]]
    shown = [ms for r in runs for ms in r["step_shown_ms"]]
    print(f"\nsteps per run: {statistics.median([r['steps'] for r in runs]):g} (median)")
    print(_row("step written → run worker has it", kept))
    print(_row("step written → on the steps stream", shown))
    print("\nthe room while runs go on: messages answered per second by the architect")
    print(f"  {'':<26} {'msg/s':>7} {'daemon CPU':>11}   cores taken: daemon, arena, others")
    for phase in phases:
        name = f"{phase['phase']}. {phase['runs']} runs in flight"
        print(
            f"  {name:<26} {phase['messages_per_s']:>7.1f} {phase['daemon_cpu_ms']:>7.2f} ms "
            f"  {phase['daemon_cores']:>12.2f} {phase['rest_cores']:>6.2f} "
            f"{phase['others_cores']:>7.2f}"
        )
    ratios, cpus = [], []
    for n in range(1, len(phases) - 1, 2):  # each phase with runs against those either side
        ratios.append(_against(phases[n - 1 : n + 2], "messages_per_s"))
        cpus.append(_against(phases[n - 1 : n + 2], "daemon_cpu_ms"))
    ratio = statistics.mean(ratios)
    print(
        f"  rate with runs / without: {ratio:.2f} ({', '.join(f'{r:.2f}' for r in ratios)}; "
        f"target ≥ 0.90); daemon CPU per message: {statistics.mean(cpus):.2f}"
    )
    return (
        f"run_overhead_p50_ms={statistics.median(overhead):.0f} "
        f"run_overhead_p95_ms={_pct(overhead, 0.95):.0f} chat_ratio_with_runs={ratio:.2f}"
    )


@contextlib.contextmanager
def _folder(keep: bool) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="arena-runs-"))
    try:
        yield folder
    finally:
        if keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs timed one at a time")
    parser.add_argument("--in-flight", type=int, default=10, help="runs going on during chat")
    parser.add_argument("--messages", type=int, default=1000, help="chat messages per phase")
    parser.add_argument("--groups", type=int, default=20, help="chat groups per phase")
    parser.add_argument("--cycles", type=int, default=2, help="chat with runs, then without")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with _folder(args.keep) as folder:
        bench = Bench(folder, workers=args.in_flight)
        try:
            bench.start()
            runs, alone_ms = measure_runs(bench, args.runs)
            phases = measure_chat(bench, args.in_flight, args.cycles, args.messages, args.groups)
        finally:
            left = bench.stop()
    print(f"load average at the start {load:.2f} ({os.cpu_count()} cores)")
    line = report(runs, alone_ms, phases)
    if left:
        print(f"ended {len(left)} processes left behind: {left}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        for run in runs:
            del run["capture"]
        figures = {"runs": runs, "alone_ms": alone_ms, "chat": phases, "load": load}
        args.json.write_text(json.dumps(figures, indent=2))
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
