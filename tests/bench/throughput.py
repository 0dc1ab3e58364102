"""End-to-end throughput: messages posted through Redis into a running daemon process.

    python tests/bench/throughput.py [--messages N] [--groups G] [--agents A[,A…]]
        [--history H[,H…]] [--provider offline|api] [--latency-ms L] [--daemons D]
        [--realistic] [--broker auto|mosquitto|embedded] [--json OUT] [--keep]

Each combination of ``--agents`` and ``--history`` is one row, run from scratch: a temporary
folder, an embedded Redis (unix socket), an MQTT broker in a process of its own (``--broker``:
Mosquitto when it is installed, as ``compose.yaml`` runs it, else the embedded ``amqtt`` one;
the table says which), A agent definitions, and H stored messages per group written through
``HistoryStore`` before a real ``python -m orchestrator daemon`` process starts. Once the
daemon logs that it is ready, one warm-up message is answered, then N messages over G groups
(each mentioning one agent, so it gets one reply) are posted with one pipeline, and the
groups' outbound streams are read with a blocking XREAD from the last ids seen until every
message has its ``done`` item, and a subscriber of the bench's own (``mqtt_tally``) has had it
on MQTT too; the bench never polls the daemon or reads a stream twice.

    messages/s      N over the time from the first post to the last ``done`` item, on the
                    streams (the Redis entry ids) or on MQTT (its arrival, same clock), in ms
    cpu_ms          the daemon processes' CPU time (user + system, from ``/proc``) during the
                    timed run, per message: what one message costs, whatever the load
    e2e             per message, its ``done`` item's entry time minus its own: queueing
                    behind the group's earlier messages included, as all N arrive at once
    overhead        per message, ``duration_ms`` of the daemon's INFO line minus the model's
                    latency (L per reply with ``--provider api``, 0 offline); with ``api`` it
                    includes the HTTP round trip to the local server
    alone           the same for 10 messages posted one at a time before the timed run
                    (nothing else in flight): the cost of one message without queueing
    interrupted     posted messages the daemon gave up and resumed later (its WARNING line);
                    a resumed message logs no duration

With ``--realistic`` each group also holds 50 session memories, 2 of them pinned, written through
``SessionMemory`` and ``Corrections`` (as an agent's marker and a person's pin would), and each
agent has a few notes in today's personal log (``PersonalLog``), all before the daemon starts:
what a group that has been used for a while gives each turn to read. Use it with the default
``--history 20`` for the realistic workload.

With ``--daemons D`` D daemon processes share the partitions (each its own consumer name); the
timed run starts once each holds a share.

The model is the daemon's offline provider, or (``--provider api``) the fake Messages API
server of ``tests/fakes.py`` reached through the real ``anthropic`` client, answering after L ms.
With ``api`` the report adds the most model calls in flight at once, and the bare SDK call
rate against the same server: ``AsyncAnthropic`` in a process of its own, sending the first
row's median request N times, at most G at once (one call per group is the most the daemon
can have). Prints a table, the targets that apply, and one line for the first row:
``messages_per_s=… overhead_p95_ms=…`` (plus ``sdk_calls_per_s=… ratio=… max_inflight=…``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any
from zoneinfo import ZoneInfo

import redis
from anthropic import AsyncAnthropic

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.adapters.mqtt_broker import MqttBroker  # noqa: E402
from orchestrator.adapters.redis_server import RedisServer  # noqa: E402
from orchestrator.core.context.tokens import TokenCounter  # noqa: E402
from orchestrator.core.models import ChatMessage, MessageKind  # noqa: E402
from orchestrator.core.tools import MEMORY_TYPES  # noqa: E402
from orchestrator.core.wire import PARTITIONS, inbox_stream, lease_key, outbox_stream  # noqa: E402
from orchestrator.memory.conversation.store import HistoryStore, NewReply  # noqa: E402
from orchestrator.memory.corrections import Corrections  # noqa: E402
from orchestrator.memory.db import make_engine  # noqa: E402
from orchestrator.memory.gate.rules import GateConfig  # noqa: E402
from orchestrator.memory.personal import PersonalLog  # noqa: E402
from orchestrator.memory.schema import PERSONAL_TYPES, PersonalDraft  # noqa: E402
from orchestrator.memory.session.store import NewMemory, SessionMemory  # noqa: E402
from orchestrator.memory.transactions import writing  # noqa: E402
from tests.bench.daemon_env import (  # noqa: E402
    check_running,
    daemon_environment,
    start_arena,
    stop_arena,
)
from tests.bench.mqtt_tally import MqttTally  # noqa: E402
from tests.fakes import FakeMessagesServer  # noqa: E402
from tests.mosquitto import mosquitto_executable, running_mosquitto  # noqa: E402
from tests.waiting import block_until  # noqa: E402

READY_RE = re.compile(r"daemon \S+: \d+ agents")
LINE_RE = re.compile(r"message (\S+) group=\S+ .*\breplies=(\d+) .*\bduration_ms=(\d+)")
INTERRUPTED_RE = re.compile(r"message (\S+) interrupted \((.*)\); it will be resumed")
READY_TIMEOUT_S = 60.0
STALL_TIMEOUT_S = 120.0  # no message finished for this long: the row fails
STOP_TIMEOUT_S = 15.0
PROGRESS_EVERY_S = 5.0
SOLO_MESSAGES = 10  # posted one at a time before the timed run
XREAD_BLOCK_MS = 500
ROLES = ("architect", "developer", "tester", "receptionist")
REPLY = "Noted. I will look at the details and post what I find in this group."
SDK_PARAMS = {"model", "max_tokens", "messages", "system"}  # the rest goes in extra_body
REALISTIC_MEMORIES = 50  # session memories per group with --realistic
REALISTIC_PINNED = 2  # of them pinned
REALISTIC_LOG_LINES = 5  # notes in each agent's log of today

PERSON_TEXTS = (
    "can we move the session store to Postgres before the launch?",
    "the login page times out when the token has expired, see the screenshot",
    "please review the retry logic in the payment client",
    "what do we log when the cache misses? I need it for the dashboard",
    "we decided to keep the REST API and add webhooks later",
    "the nightly build failed again on the migration step",
    "is the rate limiter per user or per API key?",
    "I pushed a fix for the flaky upload test, can someone check it?",
)
AGENT_TEXTS = (
    "Yes: the schema is ready, the only blocker is the JSON column on the old tables.",
    "I reproduced it. The refresh call races the redirect; a fix is on the branch.",
    "The backoff doubles without a cap. I suggest a 30 second ceiling and jitter.",
    "Only the key and the miss reason, at DEBUG. I can add a counter for the dashboard.",
    "Agreed. I wrote the decision down with the reasons, so we can revisit it later.",
    "The migration locks the messages table for too long; splitting it in batches fixes it.",
    "Per API key, with a burst of 20. Per user limits are on the list for next month.",
    "Checked: the test passes 200 times in a row now. Merged.",
)


# ---------------------------------------------------------------------------------- setup


def _save(store: HistoryStore, message: ChatMessage, **row: Any) -> None:
    """Store one message in a transaction of its own (the import's write path)."""
    with writing(store.engine) as conn:
        store.record_in(conn, [NewReply(message=message, **row)])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_agents(folder: Path, count: int) -> None:
    """A agent definitions; each borrows a repository role's identity files."""
    (folder / "agents").mkdir()
    for n in range(count):
        (folder / "agents" / f"agent{n}.yaml").write_text(
            textwrap.dedent(f"""
            id: agent{n}
            name: Agent {n}
            role: bench role {n}
            model: claude-bench
            max_concurrency: 1000
            default: {"true" if n == 0 else "false"}
            """)
        )
        target = folder / "workspaces" / f"agent{n}"
        target.mkdir(parents=True)
        for name in ("CLAUDE.md", "SOUL.md"):
            source = REPO / "workspaces" / ROLES[n % len(ROLES)] / name
            if source.exists():
                shutil.copy2(source, target / name)


def _fill_history(database: Path, groups: list[str], per_group: int, agents: int) -> float:
    """Store ``per_group`` messages in each group: a person's message, then an agent's reply.

    Returns:
        The seconds it took.
    """
    started = time.perf_counter()
    engine = make_engine(f"sqlite:///{database}")
    store = HistoryStore(engine)
    counter = TokenCounter()
    first = datetime.now(UTC) - timedelta(minutes=per_group + 1)
    for g, group in enumerate(groups):
        for n in range(0, per_group, 2):
            at = first + timedelta(minutes=n)
            person_id = f"{int(at.timestamp() * 1000)}-{g}"
            text = PERSON_TEXTS[(n // 2 + g) % len(PERSON_TEXTS)]
            person = ChatMessage(
                id=person_id,
                group=group,
                sender="alex",
                kind=MessageKind.HUMAN,
                text=text,
                created_at=at,
            )
            _save(store, person, status="done", tokens=counter.count(text))
            if n + 1 >= per_group:
                break
            agent = f"agent{(n // 2) % agents}"
            text = AGENT_TEXTS[(n // 2 + g) % len(AGENT_TEXTS)]
            reply = ChatMessage(
                id=f"{person_id}:1:{agent}",
                group=group,
                sender=agent,
                kind=MessageKind.AGENT,
                text=text,
                created_at=at + timedelta(seconds=20),
                in_reply_to=person_id,
                hop=1,
            )
            _save(store, reply, status="done", tokens=counter.count(text))
    engine.dispose()
    return time.perf_counter() - started


MEMORY_TEXTS = (
    "the {topic} work in {group} is owned by {agent}; ask before changing it (note {n})",
    "{group} agreed to keep the {topic} behind a feature flag until review {n} passes",
    "people in {group} want short answers with the command to run first (note {n})",
    "the {topic} deadline for {group} moved to the end of sprint {n}",
    "{agent} found that the {topic} tests need the staging database, run {n}",
)
TOPICS = ("payments", "login", "search", "exports", "billing", "uploads", "alerts", "reports")


def _fill_memories(database: Path, groups: list[str], agents: int) -> float:
    """Store ``REALISTIC_MEMORIES`` session memories in each group, as agents' markers would,
    and pin ``REALISTIC_PINNED`` of them, as a person would.

    Returns:
        The seconds it took.
    """
    started = time.perf_counter()
    engine = make_engine(f"sqlite:///{database}")
    memory = SessionMemory(engine)
    corrections = Corrections(engine, gate=GateConfig())
    now = datetime.now(UTC) - timedelta(hours=1)
    for g, group in enumerate(groups):
        items = []
        for n in range(REALISTIC_MEMORIES):
            agent = f"agent{n % agents}"
            template = MEMORY_TEXTS[n % len(MEMORY_TEXTS)]
            topic = TOPICS[(n + g) % len(TOPICS)]
            items.append(
                NewMemory(
                    scope="session",
                    scope_id=group,
                    type=MEMORY_TYPES[n % len(MEMORY_TYPES)],
                    content=template.format(topic=topic, group=group, agent=agent, n=n),
                    now=now + timedelta(seconds=n),
                    agent=agent,
                    group_id=group,
                )
            )
        outcomes = memory.write_many(items)
        for outcome in outcomes[:REALISTIC_PINNED]:
            corrections.pin(outcome.record.id, by="alex", now=now)
    engine.dispose()
    return time.perf_counter() - started


def _fill_logs(workspaces: Path, agents: int) -> None:
    """A few notes in each agent's personal log of today (UTC, the daemon's default zone)."""
    log = PersonalLog(workspaces, ZoneInfo("UTC"))
    now = datetime.now(UTC)
    for a in range(agents):
        for n in range(REALISTIC_LOG_LINES):
            kind = PERSONAL_TYPES[n % len(PERSONAL_TYPES)]
            text = f"{TOPICS[(a + n) % len(TOPICS)]}: check the open review before answering"
            log.append(
                f"agent{a}",
                PersonalDraft(content=f"{text} ({n})", type=kind),
                source=f"g{n}/seed-{n}",
                now=now - timedelta(minutes=REALISTIC_LOG_LINES - n),
            )


def _environment(
    folder: Path, redis_url: str, mqtt_url: str, fake_url: str | None
) -> dict[str, str]:
    model = {"ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": fake_url} if fake_url else {}
    return daemon_environment(
        folder,
        redis_url,
        mqtt_url,
        ARENA_AGENTS_DIR=str(folder / "agents"),
        ARENA_CONSUMER="bench",
        ARENA_LOG_LEVEL="INFO",
        ARENA_MAX_INFLIGHT="100000",
        ARENA_SHUTDOWN_TIMEOUT_S="5",
        ARENA_MODEL_MAX_RETRIES="0",
        **model,
    )


# ---------------------------------------------------------------------------------- processes


def _serve_mqtt(port: int, password: str, ready: Any) -> None:
    """The embedded broker, in a process of its own (started with ``spawn``)."""
    os.setsid()  # Ctrl-C reaches only the bench, which stops this process itself

    async def serve() -> None:
        async with MqttBroker("127.0.0.1", port, password=password):
            ready.set()
            await asyncio.Event().wait()

    asyncio.run(serve())


def broker_kind(asked: str) -> str:
    """``mosquitto`` or ``embedded``: ``auto`` is Mosquitto when it is installed."""
    if asked != "auto":
        return asked
    return "mosquitto" if mosquitto_executable() else "embedded"


def _installed_broker(value: str) -> str:
    if value == "mosquitto" and mosquitto_executable() is None:
        raise argparse.ArgumentTypeError("mosquitto is not installed (apt-get install mosquitto)")
    return value


def add_broker_option(parser: argparse.ArgumentParser) -> None:
    """The ``--broker`` option (read it with :func:`broker_kind`)."""
    parser.add_argument(
        "--broker",
        type=_installed_broker,
        choices=["auto", "mosquitto", "embedded"],
        default="auto",
        help="the MQTT broker our replies go through: Mosquitto (as compose.yaml runs it), the "
        "embedded amqtt one, or auto (Mosquitto when installed, the default)",
    )


@contextlib.contextmanager
def _broker(kind: str, folder: Path) -> Iterator[str]:
    """An MQTT broker on a free port, in a process of its own so that it never waits for ours:
    Mosquitto (``kind`` "mosquitto", as ``compose.yaml`` runs it) or the embedded one."""
    if kind == "mosquitto":
        with _mosquitto(folder) as url:
            yield url
        return
    with _embedded_broker() as url:
        yield url


@contextlib.contextmanager
def _mosquitto(folder: Path) -> Iterator[str]:
    """Mosquitto listening on a free local port, anonymous clients allowed, nothing persisted."""
    executable = mosquitto_executable()
    if executable is None:
        raise RuntimeError("mosquitto is not installed (apt-get install mosquitto)")
    # As compose's mosquitto.conf: small packets (acknowledgements) sent at once.
    options = "allow_anonymous true\nset_tcp_nodelay true\n"
    port = _free_port()
    with running_mosquitto(executable, port, folder, options, READY_TIMEOUT_S) as url:
        yield url


@contextlib.contextmanager
def _embedded_broker() -> Iterator[str]:
    """The embedded broker on a free port, in its own process (started with ``spawn``)."""
    port = _free_port()
    password = secrets.token_urlsafe(16)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    args = (port, password, ready)
    proc = context.Process(target=_serve_mqtt, args=args, name="bench-mqtt", daemon=True)
    proc.start()
    try:

        def started() -> bool:
            if not proc.is_alive():
                raise RuntimeError("the MQTT broker did not start")
            return ready.is_set()

        block_until(started, timeout_s=READY_TIMEOUT_S, what="the MQTT broker to start")
        # The daemons publish as the arena (the broker drops anyone else's replies).
        yield MqttBroker("127.0.0.1", port, password=password).publisher_url
    finally:
        proc.terminate()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


@dataclass(slots=True)
class Daemon:
    """The daemon process and its log file."""

    popen: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, env: dict[str, str], log: Path) -> Daemon:
        return cls(popen=start_arena("daemon", env, log), log=log)

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def check_alive(self) -> None:
        check_running(self.popen, self.log, "the daemon")

    def wait_ready(self) -> None:

        def ready() -> bool:
            self.check_alive()
            return READY_RE.search(self.text()) is not None

        block_until(ready, timeout_s=READY_TIMEOUT_S, what="the daemon to be ready")

    def holds_partitions(self, client: redis.Redis, daemons: int) -> bool:
        """Whether ``daemons`` daemons each hold a share of the partitions."""
        owners = client.mget([lease_key(f"p{p}") for p in range(PARTITIONS)])
        return len({o for o in owners if o}) == daemons and all(owners)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL what outlives the timeout."""
        stop_arena(self.popen, STOP_TIMEOUT_S)


# ---------------------------------------------------------------------------------- a row


def _ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


@dataclass(slots=True)
class Outboxes:
    """What the groups' outbound streams gained, read from the last ids seen."""

    client: redis.Redis
    cursors: dict[str, str]
    done_ms: dict[str, int] = field(default_factory=dict)  # message id -> done entry's time
    replies: int = 0
    notices: int = 0

    @classmethod
    def of(cls, client: redis.Redis, groups: list[str]) -> Outboxes:
        """Start after what the streams already hold."""
        streams = [outbox_stream(g) for g in groups]
        pipe = client.pipeline(transaction=False)
        for stream in streams:
            pipe.xrevrange(stream, count=1)
        lasts = pipe.execute()
        cursors = {
            s: last[0][0].decode() if last else "0-0"
            for s, last in zip(streams, lasts, strict=True)
        }
        return cls(client=client, cursors=cursors)

    def read(self) -> None:
        streams: dict[Any, Any] = dict(self.cursors)
        response: Any = self.client.xread(streams, block=XREAD_BLOCK_MS)
        for stream, entries in response or []:
            for entry_id, raw in entries:
                self.cursors[stream.decode()] = entry_id.decode()
                kind = raw.get(b"type", b"").decode()
                if kind == "done":
                    self.done_ms[raw[b"in_reply_to"].decode()] = _ms(entry_id.decode())
                elif kind == "reply":
                    self.replies += 1
                elif kind == "notice":
                    self.notices += 1

    def wait(self, count: int, daemon: Daemons, progress: Callable[[int], None]) -> None:
        """Read until ``count`` messages are done; fail when the daemon dies or stalls."""
        last_progress = time.monotonic()
        last_change = time.monotonic()
        seen = len(self.done_ms)
        while len(self.done_ms) < count:
            self.read()
            now = time.monotonic()
            if len(self.done_ms) != seen:
                seen, last_change = len(self.done_ms), now
            elif now - last_change > STALL_TIMEOUT_S:
                raise RuntimeError(f"no message finished for {STALL_TIMEOUT_S:g}s at {seen}")
            if now - last_progress >= PROGRESS_EVERY_S:
                progress(seen)
                last_progress = now
            daemon.check_alive()


def _post(
    client: redis.Redis, groups: list[str], count: int, agents: int, word: str = "message"
) -> list[str]:
    """Post ``count`` messages with one pipeline; their ids, in order."""
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        text = f"@agent{n % agents} {word} {n}"
        pipe.xadd(
            inbox_stream(), {"group": groups[n % len(groups)], "sender": "bench", "text": text}
        )
    return [entry_id.decode() for entry_id in pipe.execute()]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * q))])


@dataclass(slots=True)
class Daemons:
    """Several daemon processes sharing one Redis (``--daemons``), used like one."""

    members: list[Daemon]

    @classmethod
    def start(cls, env: dict[str, str], folder: Path, count: int) -> Daemons:
        return cls(
            [
                Daemon.start({**env, "ARENA_CONSUMER": f"bench-{n}"}, folder / f"daemon-{n}.log")
                for n in range(count)
            ]
        )

    def text(self) -> str:
        return "".join(d.text() for d in self.members)

    def check_alive(self) -> None:
        for daemon in self.members:
            daemon.check_alive()

    def wait_ready(self, client: redis.Redis) -> None:
        for daemon in self.members:
            daemon.wait_ready()

        def shared() -> bool:
            self.check_alive()
            return self.members[0].holds_partitions(client, len(self.members))

        block_until(shared, timeout_s=READY_TIMEOUT_S, what="the daemons to share the partitions")

    def cpu_s(self) -> float:
        """CPU time the daemon processes have used (user + system), from ``/proc``."""
        total = 0.0
        for daemon in self.members:
            fields = Path(f"/proc/{daemon.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self) -> None:
        for daemon in self.members:
            daemon.stop()


def _interrupted(log: str, ids: set[str]) -> dict[str, str]:
    """Posted messages whose handling was given up, to be resumed later: id -> reason."""
    return {m.group(1): m.group(2) for m in INTERRUPTED_RE.finditer(log) if m.group(1) in ids}


def _overheads(log: str, ids: set[str], latency_ms: int) -> list[float]:
    """Per posted message: its handling time less the model's latency for each reply."""
    values = []
    for match in LINE_RE.finditer(log):
        if match.group(1) in ids:
            replies, duration = int(match.group(2)), float(match.group(3))
            values.append(max(0.0, duration - latency_ms * replies))
    return values


@dataclass(frozen=True, slots=True, kw_only=True)
class RowPlan:
    """One combination to measure."""

    agents: int
    history: int
    provider: str
    latency_ms: int
    groups: int
    messages: int
    daemons: int = 1
    realistic: bool = False
    broker: str = "embedded"


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_row(
    plan: RowPlan, folder: Path, fake: FakeMessagesServer | None, label: str
) -> dict[str, Any]:
    """Measure one row from scratch in ``folder``."""
    (folder / "data").mkdir()
    _write_agents(folder, plan.agents)
    groups = [f"g{n}" for n in range(plan.groups)]
    if plan.history:
        took = _fill_history(folder / "data" / "arena.db", groups, plan.history, plan.agents)
        _stderr(f"{label}: {plan.groups} x {plan.history} history messages stored in {took:.1f}s")
    if plan.realistic:
        took = _fill_memories(folder / "data" / "arena.db", groups, plan.agents)
        _fill_logs(folder / "workspaces", plan.agents)
        _stderr(f"{label}: {plan.groups} x {REALISTIC_MEMORIES} memories stored in {took:.1f}s")
    server = RedisServer(folder / "redis", unix_socket=folder / "redis" / "redis.sock")
    server.start()
    try:
        with _broker(plan.broker, folder / "mqtt") as mqtt_url:
            env = _environment(folder, server.url, mqtt_url, fake.base_url if fake else None)
            daemon = Daemons.start(env, folder, plan.daemons)
            try:
                result = _drive(plan, daemon, server.url, mqtt_url, groups, fake, label)
            finally:
                daemon.stop()
    finally:
        server.stop()
    log = daemon.text()
    ids = set(result.pop("ids"))
    overhead = _overheads(log, ids, result["model_ms"])
    solo = _overheads(log, set(result.pop("solo_ids")), result["model_ms"])
    interrupted = _interrupted(log, ids)
    result.update(
        logged=len(overhead),
        interrupted=len(interrupted),
        interrupted_reasons=sorted(set(interrupted.values())),
        overhead_p50_ms=_pct(overhead, 0.50),
        overhead_p95_ms=_pct(overhead, 0.95),
        overhead_p99_ms=_pct(overhead, 0.99),
        overhead_mean_ms=round(statistics.fmean(overhead), 1) if overhead else None,
        alone_p50_ms=_pct(solo, 0.50),
        alone_max_ms=max(solo, default=None),
    )
    return result


def _drive(
    plan: RowPlan,
    daemon: Daemons,
    redis_url: str,
    mqtt_url: str,
    groups: list[str],
    fake: FakeMessagesServer | None,
    label: str,
) -> dict[str, Any]:
    announced = MqttTally(mqtt_url)
    client = redis.Redis.from_url(redis_url, socket_timeout=30)
    try:
        daemon.wait_ready(client)
        # One message first: imports, templates and connections warm up outside the clock.
        warmup = Outboxes.of(client, ["warmup"])
        _post(client, ["warmup"], 1, plan.agents)
        warmup.wait(1, daemon, lambda _n: None)
        # Then a few alone, one at a time: the overhead of a message with nothing else to do.
        solo_ids = []
        for group in groups[:SOLO_MESSAGES]:
            alone = Outboxes.of(client, [group])
            solo_ids += _post(client, [group], 1, plan.agents, word="alone")
            alone.wait(1, daemon, lambda _n: None)
        if fake is not None:
            fake.reset()
        outboxes = Outboxes.of(client, groups)
        started = time.monotonic()
        cpu_before = daemon.cpu_s()
        ids = _post(client, groups, plan.messages, plan.agents)

        def progress(done: int) -> None:
            elapsed = time.monotonic() - started
            _stderr(f"{label}: answered {done}/{plan.messages} ({elapsed:.0f}s)")

        outboxes.wait(plan.messages, daemon, progress)
        announced.wait(ids, stall_s=STALL_TIMEOUT_S, check=daemon.check_alive)
        cpu_ms = (daemon.cpu_s() - cpu_before) * 1000
    finally:
        client.close()
        announced.close()
    last_done = max(max(outboxes.done_ms.values()), max(announced.done_ms[i] for i in ids))
    seconds = (last_done - _ms(ids[0])) / 1000
    e2e = [float(outboxes.done_ms[i] - _ms(i)) for i in ids]
    row: dict[str, Any] = {
        "daemons": plan.daemons,
        "broker": plan.broker,
        "agents": plan.agents,
        "history": plan.history,
        "memories": REALISTIC_MEMORIES if plan.realistic else 0,
        "provider": plan.provider,
        "latency_ms": plan.latency_ms,
        "groups": plan.groups,
        "messages": plan.messages,
        "seconds": round(seconds, 3),
        "cpu_ms_per_message": round(cpu_ms / plan.messages, 2),
        "messages_per_s": round(plan.messages / max(seconds, 0.001), 1),
        "e2e_p50_ms": _pct(e2e, 0.50),
        "e2e_p95_ms": _pct(e2e, 0.95),
        "replies": outboxes.replies,
        "notices": outboxes.notices,
        "model_ms": plan.latency_ms if plan.provider == "api" else 0,
        "ids": ids,
        "solo_ids": solo_ids,
    }
    if fake is not None:
        requests = fake.requests
        row["max_inflight"] = fake.max_inflight
        row["model_calls"] = len(requests)
        sizes = sorted(requests, key=lambda r: len(json.dumps(r)))
        row["sample_request"] = sizes[len(sizes) // 2] if sizes else None
        fake.reset()
    return row


# ---------------------------------------------------------------------------------- SDK floor


def _sdk_rate(base_url: str, request: dict[str, Any], calls: int, concurrency: int) -> float:
    """Bare ``AsyncAnthropic`` calls per second (run in a process of its own)."""
    body = {k: v for k, v in request.items() if k in SDK_PARAMS}
    extra = {k: v for k, v in request.items() if k not in SDK_PARAMS and k != "stream"}

    async def measure() -> float:
        client = AsyncAnthropic(api_key="bench", base_url=base_url, max_retries=0)
        limit = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with limit:
                await client.messages.create(**body, extra_body=extra or None)

        await one()  # warm-up, as the daemon gets one message
        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        elapsed = time.perf_counter() - started
        await client.close()
        return calls / elapsed

    return asyncio.run(measure())


def measure_sdk(
    fake: FakeMessagesServer, request: dict[str, Any], calls: int, groups: int
) -> float:
    concurrency = max(1, min(groups, calls))
    _stderr(f"sdk: {calls} bare calls, at most {concurrency} at once")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        rate = pool.submit(_sdk_rate, fake.base_url, request, calls, concurrency).result()
    fake.reset()
    return round(rate, 1)


# ---------------------------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    applies: Callable[[dict[str, Any]], bool]
    value: Callable[[dict[str, Any]], float | None]
    goal: float
    at_least: bool

    def check(self, row: dict[str, Any]) -> dict[str, Any]:
        value = self.value(row)
        ok = value is not None and (value >= self.goal if self.at_least else value <= self.goal)
        return {"target": self.name, "goal": self.goal, "value": value, "ok": ok}


TARGETS = (
    Target(
        "offline, 200 groups, 4 agents: messages/s >= 1000",
        lambda r: r["provider"] == "offline" and r["groups"] == 200 and r["agents"] == 4,
        lambda r: r["messages_per_s"],
        1000,
        True,
    ),
    Target(
        "api at 0 ms: messages/s / SDK calls/s >= 0.8",
        lambda r: r["provider"] == "api" and r["latency_ms"] == 0 and "ratio" in r,
        lambda r: r["ratio"],
        0.8,
        True,
    ),
    Target("overhead p95 <= 5 ms", lambda r: True, lambda r: r["overhead_p95_ms"], 5, False),
    Target(
        "api, 1 s latency, 200 groups: messages/s >= 150",
        lambda r: r["provider"] == "api" and r["latency_ms"] == 1000 and r["groups"] == 200,
        lambda r: r["messages_per_s"],
        150,
        True,
    ),
)

COLUMNS = (
    ("daemons", "daemons"),
    ("broker", "broker"),
    ("agents", "agents"),
    ("history", "history"),
    ("memories", "memories"),
    ("provider", "provider"),
    ("latency_ms", "lat_ms"),
    ("groups", "groups"),
    ("messages", "msgs"),
    ("seconds", "seconds"),
    ("messages_per_s", "msg/s"),
    ("cpu_ms_per_message", "cpu_ms"),
    ("overhead_p50_ms", "ovh_p50"),
    ("overhead_p95_ms", "ovh_p95"),
    ("overhead_p99_ms", "ovh_p99"),
    ("e2e_p50_ms", "e2e_p50"),
    ("e2e_p95_ms", "e2e_p95"),
    ("alone_p50_ms", "alone_p50"),
    ("interrupted", "interrupted"),
    ("max_inflight", "inflight"),
)


def print_report(report: dict[str, Any]) -> None:
    rows = report["rows"]
    columns = [(k, h) for k, h in COLUMNS if any(k in row for row in rows)]
    cells = [[h for _k, h in columns]]
    cells += [[str(row.get(k, "")) for k, _h in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    print(f"throughput ({report['machine']}); times in ms, e2e from post to done item")
    for line in cells:
        print("  " + "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    if "sdk_calls_per_s" in report:
        print(f"  bare SDK calls/s against the same server: {report['sdk_calls_per_s']}")
    for n, row in enumerate(rows, start=1):
        for warning in _warnings(row):
            print(f"  warning, row {n}: {warning}")
    for check in report["targets"]:
        verdict = "ok" if check["ok"] else "MISSED"
        where = f"agents={check['agents']} history={check['history']}"
        print(f"  target {check['target']} ({where}): {check['value']} {verdict}")


def _warnings(row: dict[str, Any]) -> list[str]:
    """What makes a row's numbers mean something else than a clean run."""
    found = []
    if row["notices"]:
        found.append(f"{row['notices']} notices (turns that failed)")
    if row["replies"] != row["messages"]:
        found.append(f"{row['replies']} replies to {row['messages']} messages")
    if row["interrupted"]:
        reasons = "; ".join(row["interrupted_reasons"])[:200]
        found.append(
            f"{row['interrupted']} messages interrupted and resumed later ({reasons}); "
            "a resumed message logs no duration, so overhead covers the others"
        )
    if row["logged"] != row["messages"]:
        found.append(f"{row['logged']} of {row['messages']} messages logged a duration")
    return found


def summary_line(first: dict[str, Any]) -> str:
    line = f"messages_per_s={first['messages_per_s']} overhead_p95_ms={first['overhead_p95_ms']}"
    if "ratio" in first:
        line += f" sdk_calls_per_s={first['sdk_calls_per_s']} ratio={first['ratio']}"
    if "max_inflight" in first:
        line += f" max_inflight={first['max_inflight']}"
    return line


# ---------------------------------------------------------------------------------- main


def _numbers(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma list of numbers: {text!r}") from exc
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"not a comma list of numbers >= 0: {text!r}")
    return values


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> dict[str, Any]:
    plans = [
        RowPlan(
            agents=agents,
            history=history,
            provider=args.provider,
            latency_ms=args.latency_ms,
            groups=args.groups,
            messages=args.messages,
            daemons=args.daemons,
            realistic=args.realistic,
            broker=broker_kind(args.broker),
        )
        for agents in args.agents
        for history in args.history
    ]
    rows: list[dict[str, Any]] = []
    sdk_rate: float | None = None
    with contextlib.ExitStack() as stack:
        fake = None
        if args.provider == "api":
            fake = stack.enter_context(
                FakeMessagesServer(lambda _request: REPLY, latency_s=args.latency_ms / 1000)
            )
        for n, plan in enumerate(plans, start=1):
            label = f"row {n}/{len(plans)}"
            _stderr(f"{label}: {plan}")
            folder = Path(tempfile.mkdtemp(prefix="arena-bench-", dir="/tmp"))
            try:
                rows.append(run_row(plan, folder, fake, label))
            finally:
                if args.keep:
                    _stderr(f"{label}: files kept in {folder}")
                else:
                    shutil.rmtree(folder, ignore_errors=True)
            _stderr(f"{label}: {rows[-1]['messages_per_s']} messages/s")
        if fake is not None and rows[0].get("sample_request"):
            sdk_rate = measure_sdk(fake, rows[0]["sample_request"], args.messages, args.groups)
    for row in rows:
        row.pop("sample_request", None)
        row.pop("model_ms", None)
        if sdk_rate:
            row["sdk_calls_per_s"] = sdk_rate
            row["ratio"] = round(row["messages_per_s"] / sdk_rate, 3)
    checks = [
        {**target.check(row), "agents": row["agents"], "history": row["history"]}
        for row in rows
        for target in TARGETS
        if target.applies(row)
    ]
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "messages_per_s": rows[0]["messages_per_s"],
        "overhead_p95_ms": rows[0]["overhead_p95_ms"],
        "rows": rows,
        "targets": checks,
    }
    if sdk_rate:
        report |= {"sdk_calls_per_s": sdk_rate, "ratio": rows[0]["ratio"]}
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--agents", type=_numbers, default=[4], help="comma list, e.g. 4,12")
    parser.add_argument(
        "--history", type=_numbers, default=[20], help="stored messages per group, e.g. 20,1000"
    )
    parser.add_argument("--provider", choices=["offline", "api"], default="offline")
    parser.add_argument("--latency-ms", type=int, default=0, help="the fake model's latency")
    parser.add_argument(
        "--daemons", type=int, default=1, help="daemon processes sharing the work (default 1)"
    )
    parser.add_argument(
        "--realistic",
        action="store_true",
        help=f"{REALISTIC_MEMORIES} session memories per group ({REALISTIC_PINNED} pinned) "
        "and today's personal logs, stored before the daemon starts",
    )
    add_broker_option(parser)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders")
    args = parser.parse_args()
    if args.messages < 1 or args.groups < 1 or min(args.agents) < 1 or args.daemons < 1:
        parser.error("--messages, --groups, --agents and --daemons must be at least 1")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        report = run(args)
    except KeyboardInterrupt:
        _stderr("throughput: interrupted")
        return 130
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(summary_line(report["rows"][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
