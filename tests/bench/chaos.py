"""Crash test: kill -9 the daemon (and sometimes a worker) while messages stream in.

    python tests/bench/chaos.py --messages N --groups G --kills K [--daemons D] [--json OUT]
        [--seed S] [--redis-url URL] [--batch B] [--interval-s T] [--timeout-s T] [--keep]

Starts an embedded Redis on a unix socket in a temporary folder (or uses ``--redis-url``,
which must not hold an ``arena:inbox`` stream yet), then real ``python -m orchestrator daemon``
and ``python -m orchestrator worker`` processes with the offline provider, a temporary data
folder, a copy of the repository's ``workspaces/`` and its ``agents/`` and ``prompts/``. MQTT
points at a closed port: publishing must never hold up message handling.

N messages over G groups are posted to the inbox stream in batches of B, one batch every T
seconds. K times, when a random share of the messages has been answered, the daemon is killed
with SIGKILL (and, every other time or so, one worker too) and started again under the same
consumer name, so it resumes its own unfinished entries. With ``--daemons D`` (D > 1) D daemons
share the partitions; the one killed is picked at random, and every other time it comes back
under a new name, so the others must take its partitions over once its leases run out. When
every message has its ``done`` item (or the time runs out) everything is stopped and checked:

    lost          messages without a ``done`` item or without a reply
    duplicated    extra copies of an outbound item id, extra replies by one agent at one hop
                  to one message (on the outbound streams and in the SQL ``messages`` table),
                  and messages stored more than once
    out_of_order  within a group, messages whose replies came out of posting order (outbound
                  stream and SQL)
    corrupted     daily logs with a line that is not a whole bullet, leftover ``.tmp`` files,
                  text files that are not UTF-8 text, JSON files that do not parse, and
                  ``PRAGMA integrity_check`` on the SQLite database

Prints a table and ends with one line ``lost=… duplicated=… out_of_order=… corrupted=…``;
exits 0 only when all four are 0. Every process it started is stopped on the way out, also on
Ctrl-C and on errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.adapters.redis_server import RedisServer  # noqa: E402
from orchestrator.core.wire import inbox_stream, outbox_stream  # noqa: E402
from tests.bench.daemon_env import copy_workspaces, daemon_environment, dead_port  # noqa: E402
from tests.waiting import block_until  # noqa: E402

CONSUMER = "chaos"
READY_LINE = "arena: ready"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
TICK_S = 0.05
EXAMPLES = 10
# `- HH:MM [type] content (source: group/entry-id)`, the whole line.
LOG_LINE_RE = re.compile(r"- \d{2}:\d{2} \[[a-z_]+\] \S.* \(source: [^()\s]+\)")
LOG_NAME_RE = re.compile(r"\d{4}-\d{2}-\d{2}\.md")
TEXT_SUFFIXES = {".md", ".txt", ".yaml", ".yml", ".j2"}


# ---------------------------------------------------------------------------------- processes


@dataclass(slots=True)
class Proc:
    """One child process and the log file it writes to."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float

    def alive(self) -> bool:
        return self.popen.poll() is None

    def ready(self) -> bool:
        try:
            return READY_LINE in self.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return False


@dataclass(slots=True)
class Fleet:
    """Starts, kills and finally stops the daemons and the workers."""

    env: dict[str, str]
    logs: Path
    workers_wanted: int
    daemons_wanted: int = 1
    daemons: dict[str, Proc] = field(default_factory=dict)  # by consumer name
    workers: list[Proc] = field(default_factory=list)
    every: list[Proc] = field(default_factory=list)
    daemon_starts: int = 0
    worker_starts: int = 0
    unexpected_exits: list[str] = field(default_factory=list)

    def _spawn(self, name: str, command: str, consumer: str = CONSUMER) -> Proc:
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", command],
                cwd=REPO,
                env={**self.env, "ARENA_CONSUMER": consumer},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own process group: Ctrl-C in the terminal reaches only this script,
                # which then stops everything in order.
                start_new_session=True,
            )
        proc = Proc(name=name, popen=popen, log=log, started=time.monotonic())
        self.every.append(proc)
        return proc

    def start_daemon(self, consumer: str) -> None:
        self.daemon_starts += 1
        self.daemons[consumer] = self._spawn(f"daemon-{self.daemon_starts}", "daemon", consumer)

    def start_worker(self) -> None:
        self.worker_starts += 1
        self.workers.append(self._spawn(f"worker-{self.worker_starts}", "worker"))

    def start(self) -> None:
        for n in range(self.daemons_wanted):
            self.start_daemon(CONSUMER if self.daemons_wanted == 1 else f"{CONSUMER}-{n}")
        for _ in range(self.workers_wanted):
            self.start_worker()

    def ready(self) -> bool:
        return all(proc.ready() for proc in self.daemons.values())

    def youngest_s(self) -> float:
        return time.monotonic() - max(proc.started for proc in self.daemons.values())

    def kill_daemon(self, rng: random.Random) -> None:
        """Kill one daemon; start it again under its name, or (one of several, every other
        time) under a new one, leaving its partitions to the others."""
        consumer = rng.choice(sorted(self.daemons))
        victim = self.daemons.pop(consumer)
        _kill(victim, signal.SIGKILL)
        victim.popen.wait(timeout=10)
        if self.daemons_wanted > 1 and rng.random() < 0.5:
            consumer = f"{CONSUMER}-{self.daemon_starts}"
        self.start_daemon(consumer)

    def kill_worker(self, rng: random.Random) -> None:
        if not self.workers:
            return
        victim = self.workers.pop(rng.randrange(len(self.workers)))
        _kill(victim, signal.SIGKILL)
        victim.popen.wait(timeout=10)
        self.start_worker()

    def watch(self) -> None:
        """Restart anything that died without being killed (and note it)."""
        for consumer, proc in list(self.daemons.items()):
            if not proc.alive():
                self.unexpected_exits.append(f"{proc.name} rc={proc.popen.returncode}")
                self.start_daemon(consumer)
        for proc in list(self.workers):
            if not proc.alive():
                self.unexpected_exits.append(f"{proc.name} rc={proc.popen.returncode}")
                self.workers.remove(proc)
                self.start_worker()

    def stop(self) -> None:
        """SIGTERM everything still running, then SIGKILL what outlives the timeout."""
        running = [p for p in self.every if p.alive()]
        for proc in running:
            _kill(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self.every:
            if proc.alive():
                _kill(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(timeout=5)


def _kill(proc: Proc, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.popen.pid, sig)


# ---------------------------------------------------------------------------------- messages


def _text(n: int, group: str) -> str:
    """Every message saves a decision and a lesson; every fourth asks two agents."""
    mention = "@architect @tester" if n % 4 == 3 else "@developer"
    return f"{mention} we decided step {n} in {group}. Lesson: note {n}"


@dataclass(slots=True)
class Posted:
    """What was posted, in order, and what came back on the outbound streams."""

    groups: list[str]
    order: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    expected_replies: dict[str, int] = field(default_factory=dict)
    posted_at: dict[str, float] = field(default_factory=dict)
    items: dict[str, list[dict[str, str]]] = field(default_factory=lambda: defaultdict(list))
    cursors: dict[str, str] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        return len(self.posted_at)

    def post(self, client: redis.Redis, numbers: range) -> None:
        pipe = client.pipeline(transaction=False)
        planned = []
        for n in numbers:
            group = self.groups[n % len(self.groups)]
            pipe.xadd(inbox_stream(), {"group": group, "sender": "chaos", "text": _text(n, group)})
            planned.append((n, group))
        for (n, group), entry_id in zip(planned, pipe.execute(), strict=True):
            key = entry_id.decode()
            self.order[group].append(key)
            self.expected_replies[key] = 2 if n % 4 == 3 else 1
            self.posted_at[key] = time.monotonic()

    def poll(self, client: redis.Redis) -> None:
        """Read what the groups' outbound streams gained since the last call."""
        streams: dict[Any, Any] = {outbox_stream(g): self.cursors.get(g, "0") for g in self.groups}
        response: Any = client.xread(streams, count=10_000)
        for stream, entries in response or []:
            group = stream.decode().split(":")[2]
            for entry_id, raw in entries:
                fields = {k.decode(): v.decode() for k, v in raw.items()}
                self.items[group].append(fields)
                self.cursors[group] = entry_id.decode()
                if fields.get("type") == "done":
                    self.done.add(fields.get("in_reply_to", ""))

    def finished(self) -> int:
        return sum(1 for key in self.posted_at if key in self.done)


# ---------------------------------------------------------------------------------- checks


@dataclass(slots=True)
class Findings:
    """Counts and a few examples of each kind of fault."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, example: str, count: int = 1) -> None:
        self.counts[kind] += count
        if len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append(example)


def check_streams(posted: Posted, found: Findings) -> None:
    for group in posted.groups:
        items = posted.items[group]
        ids = Counter(item.get("id", "") for item in items)
        for item_id, copies in ids.items():
            if copies > 1:
                found.add("duplicated", f"outbound {group}: id {item_id} x{copies}", copies - 1)
        turns = Counter(
            (item.get("in_reply_to"), item.get("hop"), item.get("sender"))
            for item in items
            if item.get("type") in ("reply", "notice")
        )
        for (message, hop, sender), copies in turns.items():
            if copies > 1:
                found.add(
                    "duplicated",
                    f"outbound {group}: {copies} replies by {sender} at hop {hop} to {message}",
                    copies - 1,
                )
        replies = Counter(i.get("in_reply_to") for i in items if i.get("type") == "reply")
        for message in posted.order[group]:
            if message not in posted.done:
                found.add("lost", f"{group}: {message} has no done item")
            elif replies[message] == 0:
                found.add("lost", f"{group}: {message} is done without a reply")
        seen = [i.get("in_reply_to", "") for i in items if i.get("type") in ("reply", "done")]
        _check_order(posted.order[group], seen, f"outbound {group}", found)
        notices = sum(1 for i in items if i.get("type") == "notice")
        if notices:
            found.add("notices", f"{group}: {notices} notices", notices)


def _check_order(posted: list[str], seen: list[str], where: str, found: Findings) -> None:
    """Replies must follow posting order: each message's replies come after the previous
    message's replies (first appearances compared, then any interleaving)."""
    rank = {key: n for n, key in enumerate(posted)}
    highest = -1
    for key in seen:
        if key not in rank:
            continue
        if rank[key] < highest:
            found.add("out_of_order", f"{where}: reply to {key} after a later message's reply")
        highest = max(highest, rank[key])


def check_sql(db: Path, posted: Posted, found: Findings) -> dict[str, Any]:
    if not db.exists():
        found.add("corrupted", f"{db}: missing")
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        verdict = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if verdict != ["ok"]:
            found.add("corrupted", f"{db}: integrity_check {verdict[:3]}")
        rows = conn.execute(
            "SELECT seq, id, group_id, sender, kind, in_reply_to, hop FROM messages ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()
    stored = Counter(row[1] for row in rows)
    for key in posted.posted_at:
        if stored[key] == 0:
            found.add("lost", f"sql: {key} not stored")
    turns = Counter((row[5], row[6], row[3]) for row in rows if row[5])
    for (message, hop, sender), copies in turns.items():
        if copies > 1:
            found.add(
                "duplicated",
                f"sql: {copies} rows by {sender} at hop {hop} to {message}",
                copies - 1,
            )
    by_group: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row[5] and row[4] != "notice":
            by_group[row[2]].append(row[5])
    for group in posted.groups:
        _check_order(posted.order[group], by_group[group], f"sql {group}", found)
    return {"sql_rows": len(rows), "sql_replies": sum(1 for row in rows if row[5])}


def check_files(roots: list[Path], found: Findings) -> dict[str, int]:
    """Half-written or unreadable files under the data and workspaces folders."""
    files = 0
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            files += 1
            _check_file(path, found)
    return {"files_checked": files}


def _check_file(path: Path, found: Findings) -> None:
    name = path.name
    if name.endswith(".tmp"):
        found.add("corrupted", f"{path}: leftover temporary file")
        return
    if path.suffix == ".json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            found.add("corrupted", f"{path}: not JSON ({exc})")
        return
    if path.suffix not in TEXT_SUFFIXES:
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        found.add("corrupted", f"{path}: not UTF-8 ({exc})")
        return
    if "\x00" in text:
        found.add("corrupted", f"{path}: NUL bytes")
    elif LOG_NAME_RE.fullmatch(name) and path.parent.name == "memory":
        _check_daily_log(path, text, found)


def _check_daily_log(path: Path, text: str, found: Findings) -> None:
    agent = path.parent.parent.name
    if not text.endswith("\n"):
        found.add("corrupted", f"{path}: last line is not whole")
    lines = text.splitlines()
    header = f"# {agent} — {path.stem}"
    if lines[:2] != [header, ""]:
        found.add("corrupted", f"{path}: header is {lines[:2]!r}")
    for number, line in enumerate(lines[2:], start=3):
        if not LOG_LINE_RE.fullmatch(line):
            found.add("corrupted", f"{path}:{number}: {line[:120]!r}")


def check_memory(db: Path, workspaces: Path, posted: Posted, found: Findings) -> dict[str, int]:
    """What agents learned, per reply: one daily-log note and one session-memory write.

    Reported apart from the four counts (a memory is learned state, not a reply): a note
    written twice, or a decision reinforced more often than agents answered, means a turn's
    markers were applied twice.
    """
    notes: Counter[str] = Counter()
    for log in workspaces.glob("*/memory/*.md"):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            match = re.search(r"\[lesson\] Lesson: note \d+ \(source: ([^)]+)\)", line)
            if match:
                notes[f"{log.parent.parent.name} {match.group(1)}"] += 1
    doubled = {k: v for k, v in notes.items() if v > 1}
    for key, copies in sorted(doubled.items()):
        found.add("notes_doubled", f"{key} x{copies}", copies - 1)
    writes: Counter[str] = Counter()
    if db.exists():
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT source_message_id, count FROM memory_entries WHERE scope = 'session'"
            ).fetchall()
        finally:
            conn.close()
        for source, count in rows:
            writes[str(source).split(":")[0]] += int(count)
    for message, expected in posted.expected_replies.items():
        if writes[message] > expected:
            found.add(
                "memory_reapplied",
                f"{message}: decision written {writes[message]} times for {expected} replies",
                writes[message] - expected,
            )
    expected_notes = sum(posted.expected_replies.values())
    return {
        "notes_expected": expected_notes,
        "notes_written": len(notes),
        "notes_missing": max(0, expected_notes - len(notes)),
        "memory_writes": sum(writes.values()),
    }


# ---------------------------------------------------------------------------------- the run


@dataclass(slots=True)
class Plan:
    """When to post and when to kill."""

    batches: list[range]
    interval_s: float
    kill_at: list[float]  # shares of messages answered
    kill_worker: list[bool]

    @classmethod
    def make(cls, args: argparse.Namespace, rng: random.Random) -> Plan:
        size = max(1, args.batch)
        batches = [range(n, min(n + size, args.messages)) for n in range(0, args.messages, size)]
        shares = sorted(rng.uniform(0.05, 0.9) for _ in range(args.kills))
        return cls(
            batches=batches,
            interval_s=args.interval_s,
            kill_at=shares,
            kill_worker=[rng.random() < 0.5 for _ in shares],
        )


def _wait_ready(fleet: Fleet) -> None:
    """Wait for the first daemons; a daemon that cannot start at all ends the run."""

    def ready() -> bool:
        if fleet.ready():
            return True
        for proc in fleet.daemons.values():
            if not proc.alive():
                tail = proc.log.read_text(encoding="utf-8", errors="replace")[-2000:]
                raise RuntimeError(f"the daemon exited at start:\n{tail}")
        return False

    block_until(ready, timeout_s=READY_TIMEOUT_S, what="the daemons to be ready")


def drive(args: argparse.Namespace, client: redis.Redis, fleet: Fleet) -> dict[str, Any]:
    """Post, kill and restart on plan; return when every message is done or time is up."""
    rng = random.Random(args.seed)
    plan = Plan.make(args, rng)
    posted = Posted(groups=[f"chaos-{n}" for n in range(args.groups)])
    fleet.start()
    _wait_ready(fleet)
    started = time.monotonic()
    deadline = started + args.timeout_s
    next_batch = 0
    kills: list[dict[str, Any]] = []
    min_up_s = 0.0
    while time.monotonic() < deadline:
        now = time.monotonic()
        if next_batch < len(plan.batches) and now >= started + next_batch * plan.interval_s:
            posted.post(client, plan.batches[next_batch])
            next_batch += 1
        posted.poll(client)
        answered = posted.finished()
        if len(kills) < len(plan.kill_at):
            due = answered >= plan.kill_at[len(kills)] * args.messages
            up = fleet.ready() and fleet.youngest_s() >= min_up_s
            if due and up:
                worker = plan.kill_worker[len(kills)]
                kills.append({"at_s": round(now - started, 2), "answered": answered})
                kills[-1]["worker"] = worker
                fleet.kill_daemon(rng)
                if worker:
                    fleet.kill_worker(rng)
                min_up_s = rng.uniform(0.2, 1.5)
        fleet.watch()
        if next_batch == len(plan.batches) and answered == args.messages:
            break
        time.sleep(TICK_S)
    elapsed = time.monotonic() - started
    posted.poll(client)
    return {"posted": posted, "kills": kills, "elapsed_s": elapsed}


def _report(args: argparse.Namespace, result: dict[str, Any], found: Findings) -> dict[str, Any]:
    counts = {k: found.counts[k] for k in ("lost", "duplicated", "out_of_order", "corrupted")}
    return {
        **counts,
        "messages": args.messages,
        "groups": args.groups,
        "kills": len(result["kills"]),
        "kills_planned": args.kills,
        "worker_kills": sum(1 for k in result["kills"] if k["worker"]),
        "daemon_starts": result["fleet"].daemon_starts,
        "daemons": args.daemons,
        "restarts": result["fleet"].daemon_starts - args.daemons,
        "worker_starts": result["fleet"].worker_starts,
        "unexpected_exits": result["fleet"].unexpected_exits,
        "answered": result["posted"].finished(),
        "notices": found.counts["notices"],
        "notes_doubled": found.counts["notes_doubled"],
        "memory_reapplied": found.counts["memory_reapplied"],
        "elapsed_s": round(result["elapsed_s"], 1),
        "total_s": round(result["total_s"], 1),
        "seed": args.seed,
        "kill_times": result["kills"],
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        **result["extra"],
        "examples": dict(found.examples),
    }


def _print(report: dict[str, Any]) -> None:
    print(f"chaos ({report['machine']}, seed {report['seed']})")
    for key in (
        "messages",
        "groups",
        "daemons",
        "answered",
        "kills",
        "worker_kills",
        "restarts",
        "worker_starts",
        "unexpected_exits",
        "notices",
        "sql_rows",
        "sql_replies",
        "notes_expected",
        "notes_written",
        "notes_doubled",
        "notes_missing",
        "memory_writes",
        "memory_reapplied",
        "files_checked",
        "elapsed_s",
        "total_s",
        "lost",
        "duplicated",
        "out_of_order",
        "corrupted",
    ):
        if key in report:
            print(f"  {key:<18}{report[key]}")
    for kind, examples in report["examples"].items():
        for example in examples:
            print(f"  {kind}: {example}")


@contextlib.contextmanager
def _redis(args: argparse.Namespace, folder: Path) -> Iterator[str]:
    if args.redis_url:
        yield args.redis_url
        return
    server = RedisServer(folder / "redis", unix_socket=folder / "redis" / "redis.sock")
    try:
        server.start()
        yield server.url
    finally:
        server.stop()


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    started = time.monotonic()
    (folder / "logs").mkdir()
    (folder / "data").mkdir()
    copy_workspaces(folder / "workspaces")
    with _redis(args, folder) as url:
        client = redis.Redis.from_url(url, socket_timeout=30)
        if client.exists(inbox_stream()):
            raise RuntimeError(f"{url} already has {inbox_stream()}; use an empty Redis")
        fleet = Fleet(
            env=daemon_environment(
                folder,
                url,
                f"mqtt://127.0.0.1:{dead_port()}",
                ARENA_CLAIM_IDLE_MS="1000",
                ARENA_LEASE_TTL_S="2",
                ARENA_LOG_LEVEL="INFO",
                ARENA_SHUTDOWN_TIMEOUT_S="5",
            ),
            logs=folder / "logs",
            workers_wanted=2,
            daemons_wanted=args.daemons,
        )
        try:
            result = drive(args, client, fleet)
        finally:
            fleet.stop()
        posted: Posted = result["posted"]
        posted.poll(client)
        client.close()
    found = Findings()
    check_streams(posted, found)
    extra = check_sql(folder / "data" / "arena.db", posted, found)
    extra |= check_files([folder / "data", folder / "workspaces"], found)
    extra |= check_memory(folder / "data" / "arena.db", folder / "workspaces", posted, found)
    result |= {"fleet": fleet, "extra": extra, "total_s": time.monotonic() - started}
    return _report(args, result, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--daemons", type=int, default=1, help="daemons sharing the work")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--batch", type=int, default=25, help="messages posted at once")
    parser.add_argument("--interval-s", type=float, default=0.5, help="time between batches")
    parser.add_argument("--timeout-s", type=float, default=600, help="give up after this long")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    if args.daemons < 1:
        parser.error("--daemons must be at least 1")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)  # also when started in the background
    folder = Path(tempfile.mkdtemp(prefix="arena-chaos-", dir="/tmp"))
    try:
        report = run(args, folder)
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"chaos: files kept in {folder}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    report["folder"] = str(folder) if args.keep else None
    _print(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    line = " ".join(f"{k}={report[k]}" for k in ("lost", "duplicated", "out_of_order", "corrupted"))
    print(line)
    return 0 if line == "lost=0 duplicated=0 out_of_order=0 corrupted=0" else 1


if __name__ == "__main__":
    sys.exit(main())
