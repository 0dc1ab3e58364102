"""Long chats end to end: is what was said hundreds of messages ago in the agent's context?

    python tests/bench/long_chat.py --data FILE [--via chat|import] [--conversations N]
        [--limit-turns N] [--agent AGENT] [--photos caption|drop] [--set NAME=VALUE …]
        [--json OUT] [--keep]

FILE is LoCoMo-shaped (``../shared/data/locomo/locomo_dev.json``: conversations of sessions
with dates, turns with ``dia_id``, questions with evidence ``dia_id``s and a category). In a
temporary folder, ``arena up`` runs on the embedded stack (its own Redis on a unix socket, its
own MQTT broker, its workers, the offline model) with default settings (``--set`` changes
one, as ``ARENA_…=VALUE`` would). Each conversation goes into a group of its own. A turn that
shares a photo is sent with the photo's caption, ``… [shares a photo: CAPTION]`` (the daemon
stores text; ``--photos drop`` sends the typed text alone):

    --via chat    each turn posted by its speaker through the Python client (``ArenaClient``),
                  waiting for the agent's reply before the next, as people chat (slow: one
                  reply per turn)
    --via import  the whole conversation through ``arena import``, dated as in the data (the
                  session's date and time, plus 30 s per turn within the session)

Once the background jobs (the groups' rolling summaries) are done, ``arena up`` is stopped
and, for every question of categories 1-4, the context AGENT's next turn would get is built as
``arena context AGENT GROUP --message QUESTION --json`` builds it (the same functions, called
in this process; the first question is also run through the real command, and the two are
compared). A question's evidence turn is in the context when its message id, its text, or for
long turns its first 120 characters (case and spacing aside) occur anywhere in what the model
would be sent (system prompt, its per-turn tail and the conversation). Reported per category
and overall:

    evidence_all        share of questions with every evidence turn in the context
    evidence_any        share with at least one
    window_only         share whose evidence turns are all among the last ARENA_HISTORY_LIMIT
                        messages of the group (what the plain history window holds: the baseline)
    memory tokens       summary + MEMORY.md + logs + recall tokens per call, p50/p95
    total tokens        the whole context per call, p50/p95
    recall ms           the time recall took per call (p50/p95); gather ms, all layers read
    full history        the same context with the whole conversation in the history window
                        (ARENA_HISTORY_LIMIT=100000): its evidence_all and total tokens, the
                        cost of "solving" this by widening the window

Evidence strings that are malformed are normalised where unambiguous ("D8:6; D9:17",
"D:11:26", "D30:05") and the rest skipped and counted; with ``--limit-turns`` questions whose
evidence was not replayed are skipped and counted. Ends with one line
``overall evidence_all=… evidence_any=… window_only=… memory_tokens_p95=… total_tokens_p95=…``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from rq.registry import StartedJobRegistry

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.background.queue import queue  # noqa: E402
from orchestrator.client import ArenaClient  # noqa: E402
from orchestrator.core.context.build import build_context  # noqa: E402
from orchestrator.core.context.tokens import TokenCounter  # noqa: E402
from orchestrator.core.context.transcript import Transcript  # noqa: E402
from orchestrator.core.models import ChatMessage, MessageKind  # noqa: E402
from orchestrator.core.wire import DEFAULT_SENDER, PARTITIONS, lease_key  # noqa: E402
from orchestrator.memory.conversation.importer import imported_id  # noqa: E402
from orchestrator.memory.conversation.store import HistoryStore  # noqa: E402
from orchestrator.memory.db import make_engine  # noqa: E402
from orchestrator.runtime.wiring import Wiring  # noqa: E402
from orchestrator.settings import Settings, load_settings  # noqa: E402
from tests.bench.daemon_env import (  # noqa: E402
    check_running,
    copy_workspaces,
    daemon_environment,
    start_arena,
    stop_arena,
)
from tests.waiting import block_until  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
MEMORY_LAYERS = ("summary", "memory_md", "logs", "recall")
TURN_OFFSET = timedelta(seconds=30)
PREFIX_CHARS = 120
FULL_HISTORY = 100_000
READY_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 120.0
JOBS_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 10.0
_ARENA = (sys.executable, "-m", "orchestrator")
DIA_RE = re.compile(r"D:?(\d+):0*(\d+)")


# ---------------------------------------------------------------------------------- the data


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime  # naive: the session's clock, as the data gives it


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(slots=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    skipped_evidence: int = 0  # evidence strings that name no turn
    skipped_questions: int = 0  # questions left with no evidence turn
    not_replayed: int = 0  # questions whose evidence lies beyond --limit-turns

    @property
    def group(self) -> str:
        return "locomo-" + re.sub(r"[^a-z0-9_-]", "-", self.sample_id.lower())[:57]


def session_time(text: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` as a naive datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def normalise_evidence(raw: str) -> list[str]:
    """``D8:6; D9:17`` -> [D8:6, D9:17]; ``D:11:26`` -> [D11:26]; ``D30:05`` -> [D30:5]."""
    return [f"D{s}:{t}" for s, t in DIA_RE.findall(raw)]


def _sessions(conversation: dict[str, Any]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    numbers = sorted(
        int(k.split("_")[1])
        for k in conversation
        if re.fullmatch(r"session_\d+", k) and conversation[k]
    )
    for n in numbers:
        yield n, conversation[f"session_{n}"]


def spoken(turn: dict[str, Any], photos: str = "caption") -> str:
    """What a turn's speaker sent: its text, and a shared photo as its caption (the daemon
    stores text: a chat brought from elsewhere carries a photo as its description)."""
    text = str(turn["text"])
    if photos == "caption" and turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def load_conversation(
    raw: dict[str, Any], limit_turns: int | None, photos: str = "caption"
) -> Conversation:
    """One conversation's turns (dated) and its questions of categories 1-4."""
    talk = raw["conversation"]
    turns: list[Turn] = []
    for n, session in _sessions(talk):
        start = session_time(talk[f"session_{n}_date_time"])
        for i, turn in enumerate(session):
            turns.append(
                Turn(turn["dia_id"], turn["speaker"], spoken(turn, photos), start + i * TURN_OFFSET)
            )
    exists = {t.dia_id for t in turns}
    turns = turns[:limit_turns] if limit_turns else turns
    replayed = {t.dia_id for t in turns}
    conversation = Conversation(sample_id=raw["sample_id"], turns=turns, questions=[])
    for qa in raw["qa"]:
        if qa["category"] not in CATEGORIES:
            continue
        evidence = [e for raw_e in qa.get("evidence", []) for e in normalise_evidence(raw_e)]
        valid = tuple(dict.fromkeys(e for e in evidence if e in exists))
        conversation.skipped_evidence += len(set(evidence)) - len(valid)
        if not valid:
            conversation.skipped_questions += 1
        elif set(valid) <= replayed:
            conversation.questions.append(Question(qa["question"], qa["category"], valid))
        else:
            conversation.not_replayed += 1
    return conversation


# ---------------------------------------------------------------------------------- arena up


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(folder: Path, overrides: dict[str, str]) -> dict[str, str]:
    """``arena up`` with nothing configured but where its folders are, an MQTT port nobody
    else uses, Redis on its unix socket only, and no web console."""
    env = daemon_environment(folder, "", "", ARENA_LOG_LEVEL="INFO", ARENA_CONSUMER="long-chat")
    for name in ("REDIS_URL", "MQTT_URL"):
        env.pop(name)
    env.update(
        ARENA_REDIS_PORT="0", ARENA_MQTT_PORT=str(_free_port()), ARENA_WEB_PORT="0", **overrides
    )
    return env


def run_arena(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``arena ARGS`` run to its end, as a person would run it; what it printed is kept."""
    return subprocess.run(
        [*_ARENA, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )


@dataclass(slots=True)
class ArenaUp:
    popen: subprocess.Popen[bytes]
    log: Path
    redis_url: str

    @classmethod
    def start(cls, folder: Path, env: dict[str, str]) -> ArenaUp:
        log = folder / "arena-up.log"
        popen = start_arena("up", env, log)
        url = f"unix://{(folder / 'data' / 'redis.sock').resolve()}"
        return cls(popen=popen, log=log, redis_url=url)

    def check_alive(self) -> None:
        check_running(self.popen, self.log, "arena up")

    def wait_ready(self) -> None:
        """Until the daemon holds every partition of the inbox."""

        def ready() -> bool:
            self.check_alive()
            with contextlib.suppress(redis.RedisError), redis.Redis.from_url(self.redis_url) as r:
                return all(r.mget([lease_key(f"p{p}") for p in range(PARTITIONS)]))
            return False

        block_until(ready, timeout_s=READY_TIMEOUT_S, what="arena up to hold every partition")

    def wait_jobs(self) -> None:
        """Until no background job is queued or running (the summaries are written)."""
        with redis.Redis.from_url(self.redis_url) as r:
            jobs = queue(r)
            running = StartedJobRegistry(queue=jobs)

            def idle() -> bool:
                self.check_alive()
                return not (jobs.count or running.count)

            block_until(idle, timeout_s=JOBS_TIMEOUT_S, what="the background jobs to finish")

    def stop(self) -> None:
        stop_arena(self.popen, STOP_TIMEOUT_S)


# ---------------------------------------------------------------------------------- replay


def _progress(label: str, done: int, total: int, started: float) -> None:
    rate = done / max(time.monotonic() - started, 1e-9)
    print(f"{label}: {done}/{total} turns ({rate:.1f}/s)", file=sys.stderr, flush=True)


def chat(conversation: Conversation, redis_url: str) -> dict[str, str]:
    """Post every turn as its speaker, each answered before the next; dia_id -> message id."""
    ids: dict[str, str] = {}
    started = last = time.monotonic()
    with ArenaClient(redis_url) as client:
        for n, turn in enumerate(conversation.turns, start=1):
            message_id, _ = client.post_and_wait(
                conversation.group, turn.text, turn.speaker, timeout_s=REPLY_TIMEOUT_S
            )
            ids[turn.dia_id] = message_id
            if time.monotonic() - last > PROGRESS_EVERY_S:
                last = time.monotonic()
                _progress(conversation.sample_id, n, len(conversation.turns), started)
    return ids


def import_lines(conversation: Conversation) -> tuple[str, dict[str, str]]:
    """The conversation as ``arena import`` reads it; dia_id -> the stored message's id."""
    own = {t.dia_id: f"{conversation.sample_id}-{t.dia_id}" for t in conversation.turns}
    ids = {dia_id: imported_id(conversation.group, i) for dia_id, i in own.items()}
    lines = [
        json.dumps(
            {
                "id": own[t.dia_id],
                "sender": t.speaker,
                "text": t.text,
                "created_at": t.at.isoformat(),
            },
            ensure_ascii=False,
        )
        for t in conversation.turns
    ]
    return "\n".join(lines) + "\n", ids


def via_import(conversation: Conversation, folder: Path, env: dict[str, str]) -> dict[str, str]:
    """``arena import`` of the whole conversation, as a person would run it."""
    text, ids = import_lines(conversation)
    path = folder / f"{conversation.group}.jsonl"
    path.write_text(text, encoding="utf-8")
    done = run_arena(env, "import", conversation.group, str(path))
    if done.returncode != 0:
        raise RuntimeError(f"arena import failed:\n{done.stdout}{done.stderr}")
    print(f"{conversation.sample_id}: {done.stdout.strip()}", file=sys.stderr, flush=True)
    return ids


# ---------------------------------------------------------------------------------- contexts


def normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def turn_present(context: str, raw_context: str, message_id: str, text: str) -> bool:
    """Whether a turn is in a context (``context`` normalised, ``raw_context`` as sent)."""
    if re.search(rf"(?<![\w:-]){re.escape(message_id)}(?![\w:-])", raw_context):
        return True
    wanted = normalised(text)
    if wanted in context:
        return True
    return len(wanted) > PREFIX_CHARS and wanted[:PREFIX_CHARS] in context


class TimedRecaller:
    """The real recaller, timing each recall."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.times_ms: list[float] = []

    def recall(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.inner.recall(*args, **kwargs)
        finally:
            self.times_ms.append((time.perf_counter() - started) * 1000)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass(slots=True)
class Builder:
    """What ``arena context`` does, for one agent, on an open database."""

    settings: Settings
    engine: Any
    agent_id: str
    wiring: Any = None
    team: Any = None
    briefing: Any = None
    recaller: TimedRecaller | None = None

    def __post_init__(self) -> None:
        self.wiring = Wiring(self.settings, self.engine)
        self.team = self.wiring.team
        self.briefing = self.wiring.briefing()
        if self.briefing.recaller is not None:
            self.recaller = TimedRecaller(self.briefing.recaller)
            self.briefing.recaller = self.recaller

    def build(self, group: str, question: str) -> tuple[dict[str, Any], float]:
        """The request and report ``arena context --json`` prints, and the gather time."""
        agent = next(a for a in self.team.agents if a.id == self.agent_id)
        now = datetime.now(UTC)
        trigger = ChatMessage(
            id="next",
            group=group,
            sender=DEFAULT_SENDER,
            kind=MessageKind.HUMAN,
            text=question,
            created_at=now,
        )
        started = time.perf_counter()
        gathered = self.briefing.gather(agent, trigger, now)
        gather_ms = (time.perf_counter() - started) * 1000
        built = build_context(
            agent=agent,
            agents=self.team.agents,
            layers=gathered.layers,
            trigger=trigger,
            prompts=self.wiring.prompts,
            now=now.astimezone(self.settings.zone),
            limits=self.wiring.tuning.limits(agent, self.wiring.drift().factor(agent.model)),
            transcript=Transcript(TokenCounter(), self.settings.tz),
        )
        request = built.request
        data = {
            "system": request.system,
            "system_tail": request.system_tail,
            "messages": [dict(m) for m in request.messages],
            "report": built.report.as_json(),
        }
        return data, gather_ms


def context_text(data: dict[str, Any]) -> str:
    parts = [data["system"], data["system_tail"], *(m["content"] for m in data["messages"])]
    return "\n".join(parts)


def memory_tokens(report: dict[str, Any]) -> int:
    tokens = report.get("tokens", {})
    return sum(int(tokens.get(name, 0)) for name in MEMORY_LAYERS)


@dataclass(slots=True)
class Row:
    """One question's outcome."""

    category: int
    evidence_all: bool
    evidence_any: bool
    window_only: bool
    memory_tokens: int
    total_tokens: int
    gather_ms: float
    full_all: bool = False
    full_tokens: int = 0


@dataclass(slots=True)
class Evaluation:
    rows: list[Row] = field(default_factory=list)
    recall_ms: list[float] = field(default_factory=list)
    skipped_evidence: int = 0
    skipped_questions: int = 0
    not_replayed: int = 0
    cli_check: str = "not run"


def _evidence(
    question: Question, conversation: Conversation, ids: dict[str, str], data: dict[str, Any]
) -> list[bool]:
    raw = context_text(data)
    context = normalised(raw)
    texts = {t.dia_id: t.text for t in conversation.turns}
    return [turn_present(context, raw, ids[e], texts[e]) for e in question.evidence]


def evaluate(
    conversation: Conversation,
    ids: dict[str, str],
    builders: tuple[Builder, Builder],
    store: HistoryStore,
    history_limit: int,
) -> list[Row]:
    """Every question of the conversation against the context its next turn would get."""
    default, full = builders
    window = {s.message.id for s in store.recent(conversation.group, history_limit)}
    rows = []
    for n, question in enumerate(conversation.questions, start=1):
        data, gather_ms = default.build(conversation.group, question.text)
        present = _evidence(question, conversation, ids, data)
        full_data, _ = full.build(conversation.group, question.text)
        full_present = _evidence(question, conversation, ids, full_data)
        rows.append(
            Row(
                category=question.category,
                evidence_all=all(present),
                evidence_any=any(present),
                window_only=all(ids[e] in window for e in question.evidence),
                memory_tokens=memory_tokens(data["report"]),
                total_tokens=int(data["report"].get("tokens", {}).get("total", 0)),
                gather_ms=gather_ms,
                full_all=all(full_present),
                full_tokens=int(full_data["report"].get("tokens", {}).get("total", 0)),
            )
        )
        if n % 50 == 0:
            print(
                f"{conversation.sample_id}: {n}/{len(conversation.questions)} questions",
                file=sys.stderr,
                flush=True,
            )
    return rows


def cli_check(
    builder: Builder, env: dict[str, str], group: str, question: str, agent_id: str
) -> str:
    """Run the real ``arena context`` once and compare it with the in-process build."""
    done = run_arena(env, "context", agent_id, group, "--message", question, "--json")
    if done.returncode != 0:
        return f"arena context failed: {done.stderr.strip()[-300:]}"
    cli = json.loads(done.stdout)
    mine, _ = builder.build(group, question)
    same = cli["system"] == mine["system"] and cli["messages"] == mine["messages"]
    return "same as arena context" if same else "DIFFERS from arena context"


# ---------------------------------------------------------------------------------- report


def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def share(rows: Sequence[Row], name: str) -> float | None:
    if not rows:
        return None
    return round(sum(bool(getattr(r, name)) for r in rows) / len(rows), 3)


def summarise(rows: Sequence[Row]) -> dict[str, Any]:
    return {
        "questions": len(rows),
        "evidence_all": share(rows, "evidence_all"),
        "evidence_any": share(rows, "evidence_any"),
        "window_only": share(rows, "window_only"),
        "memory_tokens_p50": pct([r.memory_tokens for r in rows], 0.5),
        "memory_tokens_p95": pct([r.memory_tokens for r in rows], 0.95),
        "total_tokens_p50": pct([r.total_tokens for r in rows], 0.5),
        "total_tokens_p95": pct([r.total_tokens for r in rows], 0.95),
        "gather_ms_p50": _round(pct([r.gather_ms for r in rows], 0.5)),
        "gather_ms_p95": _round(pct([r.gather_ms for r in rows], 0.95)),
        "full_history_evidence_all": share(rows, "full_all"),
        "full_history_tokens_p50": pct([r.full_tokens for r in rows], 0.5),
        "full_history_tokens_p95": pct([r.full_tokens for r in rows], 0.95),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


COLUMNS = (
    ("category", 12, "name"),
    ("n", 5, "questions"),
    ("all", 6, "evidence_all"),
    ("any", 6, "evidence_any"),
    ("window", 7, "window_only"),
    ("mem p50", 8, "memory_tokens_p50"),
    ("mem p95", 8, "memory_tokens_p95"),
    ("tot p50", 8, "total_tokens_p50"),
    ("tot p95", 8, "total_tokens_p95"),
    ("full all", 9, "full_history_evidence_all"),
    ("full p95", 9, "full_history_tokens_p95"),
)


def print_table(table: list[dict[str, Any]]) -> None:
    print("".join(f"{title:>{width}}" for title, width, _ in COLUMNS))
    for row in table:
        cells = []
        for _, width, key in COLUMNS:
            value = row.get(key)
            cells.append(f"{'-' if value is None else value!s:>{width}}")
        print("".join(cells))


def report(evaluation: Evaluation, meta: dict[str, Any]) -> dict[str, Any]:
    table = []
    for category, name in CATEGORIES.items():
        rows = [r for r in evaluation.rows if r.category == category]
        table.append({"name": f"{category} {name}", **summarise(rows)})
    overall = {"name": "overall", **summarise(evaluation.rows)}
    overall["recall_ms_p50"] = _round(pct(evaluation.recall_ms, 0.5))
    overall["recall_ms_p95"] = _round(pct(evaluation.recall_ms, 0.95))
    table.append(overall)
    return {
        **meta,
        "skipped_evidence": evaluation.skipped_evidence,
        "skipped_questions": evaluation.skipped_questions,
        "questions_not_replayed": evaluation.not_replayed,
        "cli_check": evaluation.cli_check,
        "categories": table[:-1],
        "overall": overall,
    }


# ---------------------------------------------------------------------------------- main


def replay(
    conversations: list[Conversation], args: argparse.Namespace, folder: Path, env: dict[str, str]
) -> tuple[dict[str, dict[str, str]], float]:
    """Every conversation into its group through a running ``arena up``; dia_id -> id maps."""
    arena = ArenaUp.start(folder, env)
    ids: dict[str, dict[str, str]] = {}
    try:
        arena.wait_ready()
        started = time.monotonic()
        for conversation in conversations:
            if args.via == "chat":
                ids[conversation.sample_id] = chat(conversation, arena.redis_url)
            else:
                ids[conversation.sample_id] = via_import(conversation, folder, env)
        took = time.monotonic() - started
        print("waiting for the background jobs (summaries)…", file=sys.stderr, flush=True)
        arena.wait_jobs()
    finally:
        arena.stop()
    return ids, took


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    raw = json.loads(Path(args.data).read_text(encoding="utf-8"))[: args.conversations]
    conversations = [load_conversation(c, args.limit_turns, args.photos) for c in raw]
    copy_workspaces(folder / "workspaces")
    (folder / "data").mkdir()
    env = environment(folder, dict(args.set))
    ids, replay_s = replay(conversations, args, folder, env)
    os.environ.update({k: v for k, v in env.items() if k.startswith("ARENA_")})
    settings = load_settings()
    evaluation = Evaluation(
        skipped_evidence=sum(c.skipped_evidence for c in conversations),
        skipped_questions=sum(c.skipped_questions for c in conversations),
        not_replayed=sum(c.not_replayed for c in conversations),
    )
    engine = make_engine(settings.effective_database_url)
    try:
        default = Builder(settings, engine, args.agent)
        full_settings = settings.model_copy(update={"history_limit": FULL_HISTORY})
        full = Builder(full_settings, engine, args.agent)
        store = HistoryStore(engine)
        for c in conversations:
            rows = evaluate(c, ids[c.sample_id], (default, full), store, settings.history_limit)
            evaluation.rows.extend(rows)
        if default.recaller is not None:
            evaluation.recall_ms = default.recaller.times_ms
        first = next((c for c in conversations if c.questions), None)
        if first is not None:
            evaluation.cli_check = cli_check(
                default, env, first.group, first.questions[0].text, args.agent
            )
    finally:
        engine.dispose()
    meta = {
        "data": str(args.data),
        "via": args.via,
        "conversations": [c.sample_id for c in conversations],
        "turns": sum(len(c.turns) for c in conversations),
        "replay_s": round(replay_s, 1),
        "agent": args.agent,
        "settings": dict(args.set),
        "history_limit": settings.history_limit,
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
    }
    return report(evaluation, meta)


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("ARENA_"):
        raise argparse.ArgumentTypeError(f"expected ARENA_NAME=VALUE, not {text!r}")
    return name, value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo-shaped JSON file")
    parser.add_argument("--via", choices=("chat", "import"), default="chat")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--limit-turns", type=int, default=None, help="only the first N turns")
    parser.add_argument("--agent", default="receptionist")
    parser.add_argument(
        "--photos",
        choices=("caption", "drop"),
        default="caption",
        help="send a shared photo as its caption, '[shares a photo: ...]' (default), or drop it",
    )
    parser.add_argument("--set", type=_setting, action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file():
        print(f"long_chat: no data at {args.data}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="arena-long-", dir="/tmp"))
    try:
        result = run(args, folder)
    finally:
        if args.keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(
        f"long chat via {result['via']}: {len(result['conversations'])} conversations, "
        f"{result['turns']} turns replayed in {result['replay_s']}s; agent {result['agent']}, "
        f"history window {result['history_limit']} messages; context check: {result['cli_check']}"
    )
    print_table([*result["categories"], result["overall"]])
    o = result["overall"]
    print(
        f"recall ms p50/p95: {o['recall_ms_p50']}/{o['recall_ms_p95']}; gather ms p50/p95: "
        f"{o['gather_ms_p50']}/{o['gather_ms_p95']}; evidence strings skipped: "
        f"{result['skipped_evidence']}, questions without evidence: {result['skipped_questions']}, "
        f"questions beyond --limit-turns: {result['questions_not_replayed']}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        f"overall evidence_all={o['evidence_all']} evidence_any={o['evidence_any']} "
        f"window_only={o['window_only']} memory_tokens_p95={o['memory_tokens_p95']} "
        f"total_tokens_p95={o['total_tokens_p95']} "
        f"full_history_evidence_all={o['full_history_evidence_all']} "
        f"full_history_tokens_p95={o['full_history_tokens_p95']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
