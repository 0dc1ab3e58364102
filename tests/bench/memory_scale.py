"""Memory at scale: write, recall and context-build latency as session memory grows.

    python tests/bench/memory_scale.py [--sizes 10000,100000,1000000] [--queries N]
        [--writes N] [--history N] [--history-rows N] [--history-group-rows N]
        [--inserts N] [--seed S] [--json OUT]

Works on a SQLite database in a temporary folder. The store is filled to each size in turn
(sizes ascending, each stage adding to the last) in bulk: rows built by the store's own
``entries.new_row``, 5,000 per transaction in one ``executemany``, the full-text index kept by
its triggers (the per-entry write path is what is measured, not how the store was filled);
progress is printed every 100,000.
Entries are deterministic text from a seeded RNG: templated decisions, requirements, facts and
preferences over a vocabulary of about 400 project words and 3,000 generated names, drawn with a
Zipf-like skew, so common words match many entries and rare ones few. 94% are session memory
of 200 groups, 5% personal memory of the four agents, 1% global memory.

At each size:

- write: an agent's reply carrying one ``SAVE_MEMORY`` marker goes through the real write path
  (``parse_markers``, then ``MemoryWriter.apply`` as ``Wiring.writer`` builds it: schema,
  daily count, gate, session store, checkpoint to the daily log for decisions and tasks); no
  model call. The time of each reply's parse and apply is one sample.
- recall: a question through ``Recaller.recall`` over ``SessionMemory`` with the default
  settings' recall layers, for a random group and agent (``mark_used`` included).

After the first size, a group gets ``--history`` stored messages and the context of a turn is
built as the daemon builds it: ``Briefing.gather`` (as ``Wiring.briefing`` builds it: the
history window, recall, files) then ``build_context`` (budget plan, prompt rendering). Both parts
are timed, and their sum is the sample.

The history case (``--history-rows``, default 1,000,000; 0 skips it) works on a database of
its own, with no memories, so that what is timed is recall over the conversation: messages are
added in bulk (5,000 per ``executemany`` into ``messages``, the history index kept by its
triggers as for every stored message), first ``--history-group-rows`` (default 100,000) into one
group, alternating people's questions and agents' replies from the same corpus, then the rest
spread over 200 other groups. Recall is timed as a turn runs it: ``Recaller.recall`` as
``Wiring`` builds it (session memory and the history index, the default settings'
recall layers), ``before_seq`` the oldest of the 200 messages the history window shows:

- group: questions to the large group when the store holds only it (target p95 <= 20 ms);
- store: at the full size, questions to the large group and to random other groups (target
  p95 <= 50 ms, for the worse of the two).
- index cost: messages stored one by one with ``HistoryStore.save`` (one transaction each, as
  the daemon stores a message), in alternating blocks of 50 with and without the index's
  insert trigger (dropped, then created again from its own SQL in ``sqlite_master``), on the
  full database: the p95 with the index minus the p95 without (target <= 0.5 ms). The trigger
  is the whole cost of indexing a new message, so the difference is that cost and nothing else.

Prints a table with each target beside the measured value (ok or MISSED), writes JSON with
--json, and ends with one line
``write_p95_ms=… recall_p95_ms_100k=… recall_p95_ms_1m=… context_p95_ms=…`` followed by the
history case's ``history_recall_p95_ms_group=… history_recall_p95_ms_store=…
index_insert_p95_added_ms=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text as sql_text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.core.context.build import build_context  # noqa: E402
from orchestrator.core.context.tokens import TokenCounter  # noqa: E402
from orchestrator.core.markers import parse_markers  # noqa: E402
from orchestrator.core.models import ChatMessage, MessageKind  # noqa: E402
from orchestrator.memory.conversation.recent import RecentMessages  # noqa: E402
from orchestrator.memory.conversation.store import HistoryStore, MessageRow, NewReply  # noqa: E402
from orchestrator.memory.db import make_engine  # noqa: E402
from orchestrator.memory.recall.recaller import Recaller  # noqa: E402
from orchestrator.memory.session.entries import ENTRIES, new_row  # noqa: E402
from orchestrator.memory.session.store import Citation, NewMemory, SessionMemory, normalise  # noqa: E402
from orchestrator.memory.transactions import writing  # noqa: E402
from orchestrator.memory.writer import Origin  # noqa: E402
from orchestrator.runtime.wiring import Wiring  # noqa: E402
from orchestrator.settings import Settings, load_settings  # noqa: E402
from tests.bench.daemon_env import copy_workspaces  # noqa: E402

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
GROUPS = 200
AGENTS = ("architect", "developer", "receptionist", "tester")
BATCH = 5_000
PROGRESS_EVERY = 100_000
CONTEXT_GROUP = "context-bench"

# Targets: (label, key in the results, at most this many ms).
WRITE_TARGET_MS = 5.0
RECALL_TARGETS_MS = {100_000: 20.0, 1_000_000: 50.0}
CONTEXT_TARGET_MS = 10.0
HISTORY_TARGETS_MS = {"group": 20.0, "store": 50.0}
INDEX_TARGET_MS = 0.5
HISTORY_GROUP = "history-big"
HISTORY_WINDOW = 200
INSERT_BLOCK = 50
INSERT_TRIGGER = "history_fts_ai"

_NOUNS = """
    api auth token schema database index cache queue worker service endpoint client server
    deploy release build pipeline test suite fixture mock staging production cluster node pod
    container image registry config secret key certificate domain proxy gateway router load
    balancer metric alert dashboard log trace span latency throughput budget quota limit rate
    retry timeout backoff circuit breaker session cookie user account role permission policy
    tenant project team sprint ticket issue bug feature epic story milestone roadmap deadline
    meeting review design document spec proposal decision requirement constraint risk estimate
    invoice payment refund order cart checkout product catalog price discount coupon customer
    vendor supplier warehouse shipment delivery address report export import backup restore
    migration table column row query transaction lock replica shard partition stream topic
    event message broker consumer producer webhook callback job schedule cron heartbeat summary
    memory context prompt model agent tool plugin module package dependency version branch
    commit merge conflict patch hotfix rollback incident outage postmortem runbook oncall pager
    frontend backend mobile desktop browser layout theme font color icon button form field
    label tooltip modal page route navigation search filter sort pagination upload download
    file folder bucket blob storage disk volume snapshot network firewall vpn dns ssl tls
    jwt oauth sso ldap saml password email phone notification sms push chat channel group
    room thread reply mention reaction emoji analytics funnel cohort experiment flag toggle
    rollout canary percentage region zone datacenter cost bill contract license audit
    compliance gdpr privacy retention archive purge encryption hash signature
"""
_VERBS = """
    use adopt replace migrate deploy ship release test review approve reject merge split
    cache index shard encrypt rotate monitor alert log trace measure benchmark profile
    refactor rewrite document design schedule estimate prioritise deprecate remove archive
    validate sanitise retry throttle batch stream publish subscribe notify escalate
"""
_ADJECTIVES = """
    fast slow simple robust secure cheap expensive stable flaky legacy modern internal
    external public private shared dedicated manual automatic daily weekly monthly nightly
    critical minor urgent optional mandatory temporary permanent primary secondary read-only
    async sync strict lenient verbose minimal large small global regional
"""
_REASONS = (
    "it is cheaper to run",
    "the team already knows it",
    "the old one kept timing out",
    "legal asked for it",
    "it scales better under load",
    "the customer insisted",
    "we need it before the launch",
    "the benchmark numbers were better",
)
_SYLLABLES = """
    ka lo mi ra tu ve shi no pe zan dor el fi qua rin tos bel mar cy xo gu ha
"""


class Corpus:
    """Deterministic, varied text: memories and questions from one seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.nouns = _NOUNS.split()
        self.verbs = _VERBS.split()
        self.adjectives = _ADJECTIVES.split()
        syllables = _SYLLABLES.split()
        names = {
            "".join(self.rng.choice(syllables) for _ in range(self.rng.randint(2, 3)))
            for _ in range(4000)
        }
        self.names = sorted(names)[:3000]
        self.rng.shuffle(self.names)
        # Zipf-like skew: the word at rank r is drawn with weight 1 / (r + 1).
        self._noun_weights = _cumulative(len(self.nouns))
        self._name_weights = _cumulative(len(self.names))

    def noun(self) -> str:
        return self.rng.choices(self.nouns, cum_weights=self._noun_weights)[0]

    def name(self) -> str:
        return self.rng.choices(self.names, cum_weights=self._name_weights)[0]

    def thing(self) -> str:
        """A noun phrase: sometimes an adjective, sometimes a named component."""
        r = self.rng.random()
        if r < 0.3:
            return f"{self.rng.choice(self.adjectives)} {self.noun()}"
        if r < 0.6:
            return f"{self.name()} {self.noun()}"
        return f"{self.noun()} {self.noun()}"

    def memory(self) -> tuple[str, str]:
        """A memory's (type, content)."""
        rng = self.rng
        kind = rng.choice(("decision", "requirement", "fact", "preference", "task", "context"))
        verb = rng.choice(self.verbs)
        if kind == "decision":
            text = f"We decided to {verb} the {self.thing()} because {rng.choice(_REASONS)}"
        elif kind == "requirement":
            text = (
                f"The {self.thing()} must {verb} every {self.noun()} within {rng.randint(1, 90)} s"
            )
        elif kind == "fact":
            text = f"The {self.thing()} runs on {self.thing()} and talks to the {self.thing()}"
        elif kind == "preference":
            text = f"{self.name().title()} prefers {self.thing()} over {self.thing()}"
        elif kind == "task":
            text = f"{self.name().title()} will {verb} the {self.thing()} by {self.noun()} day"
        else:
            text = f"The {self.thing()} was {verb}ed after the {self.thing()} {self.noun()}"
        if rng.random() < 0.4:
            text += f", see {self.name()} {self.noun()} {rng.randint(1, 9999)}"
        return kind, text + "."

    def question(self) -> str:
        """A question a person might ask a group."""
        rng = self.rng
        forms = (
            f"what did we decide about the {self.thing()}?",
            f"which {self.noun()} does the {self.thing()} use",
            f"@developer can you {rng.choice(self.verbs)} the {self.thing()} for {self.name()}",
            f"remind me why we {rng.choice(self.verbs)} the {self.noun()}",
            f"is the {self.thing()} still {rng.choice(self.adjectives)}?",
            f"who owns {self.name()} and the {self.noun()} {self.noun()}",
        )
        return rng.choice(forms)


def _save(store: HistoryStore, message: ChatMessage, **row: Any) -> None:
    """Store one message in a transaction of its own (the import's write path)."""
    with writing(store.engine) as conn:
        store.record_in(conn, [NewReply(message=message, **row)])


def _cumulative(n: int) -> list[float]:
    total, out = 0.0, []
    for rank in range(n):
        total += 1.0 / (rank + 1)
        out.append(total)
    return out


def _scope_of(n: int, rng: random.Random) -> tuple[str, str, str]:
    """(scope, scope_id, agent) of the n-th filled entry: 94% session, 5% personal, 1% global."""
    agent = AGENTS[n % len(AGENTS)]
    r = rng.random()
    if r < 0.01:
        return "global", "", agent
    if r < 0.06:
        return "personal", agent, agent
    return "session", f"g{rng.randrange(GROUPS)}", agent


def new_memories(corpus: Corpus, start: int, stop: int) -> Iterator[NewMemory]:
    """Entries ``start`` to ``stop``, written over the past year."""
    for n in range(start, stop):
        scope, scope_id, agent = _scope_of(n, corpus.rng)
        kind, content = corpus.memory()
        group = scope_id if scope == "session" else f"g{n % GROUPS}"
        ref = f"fill-{n}"
        yield NewMemory(
            scope=scope,  # type: ignore[arg-type]
            scope_id=scope_id,
            type=kind,
            content=content,
            now=NOW - timedelta(days=365) + timedelta(seconds=n * 3),
            confidence=round(corpus.rng.uniform(0.7, 1.0), 2),
            agent=agent,
            group_id=group,
            source_message_id=ref,
            citation=Citation(kind="message", ref=ref, locator=f"groups/{group}/messages/{ref}"),
            written_by="agent",
        )


def fill(engine: Engine, corpus: Corpus, start: int, stop: int) -> dict[str, Any]:
    """Add entries ``start`` to ``stop`` in bulk, in transactions of ``BATCH`` rows.

    Rows are built by the store's own ``new_row`` (as ``SessionMemory.write`` stores them)
    and inserted with one ``executemany`` per transaction; the full-text index follows through
    its triggers. A row whose text an active entry of its scope already holds (which the write
    path would have reinforced) is left out by the unique index and counted.
    """
    began = time.perf_counter()
    added = skipped = 0
    n = start
    while n < stop:
        upto = min(stop, n + BATCH)
        rows = [new_row(item, normalise(item.content)) for item in new_memories(corpus, n, upto)]
        with engine.begin() as conn:
            done = conn.execute(sqlite_insert(ENTRIES).on_conflict_do_nothing(), rows).rowcount
        added += done
        skipped += len(rows) - done
        if upto // PROGRESS_EVERY > n // PROGRESS_EVERY or upto == stop:
            rate = (upto - start) / max(time.perf_counter() - began, 1e-9)
            print(f"  filled {upto:>9,} entries ({rate:,.0f}/s)", flush=True)
        n = upto
    return {"fill_s": round(time.perf_counter() - began, 1), "added": added, "skipped": skipped}


# ---------------------------------------------------------------------------------- timing


@dataclass(slots=True)
class Samples:
    values_ms: list[float] = field(default_factory=list)

    def since(self, started: float) -> None:
        """Record the time from ``started`` (a ``perf_counter`` value) to now."""
        self.values_ms.append((time.perf_counter() - started) * 1000)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.values_ms)
        return {
            "p50_ms": round(_pct(ordered, 0.50), 3),
            "p95_ms": round(_pct(ordered, 0.95), 3),
            "max_ms": round(ordered[-1], 3) if ordered else 0.0,
            "samples": len(ordered),
        }


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def measure_writes(settings: Settings, engine: Any, corpus: Corpus, count: int, tag: str) -> Any:
    """``count`` replies, each with one SAVE_MEMORY marker, through parse and apply."""
    writer = Wiring(settings, engine).writer
    samples = Samples()
    outcomes: dict[str, int] = {}
    for n in range(count):
        kind, content = corpus.memory()
        payload = {"type": kind, "content": content, "confidence": 0.9, "tags": [corpus.noun()]}
        if n % 5 == 0:
            payload["key"] = f"{corpus.noun()}_{corpus.noun()}"
        reply = f"Noted, I will keep that in mind.\n<!--SAVE_MEMORY:{json.dumps(payload)}-->"
        origin = Origin(
            agent=AGENTS[n % len(AGENTS)],
            group=f"g{corpus.rng.randrange(GROUPS)}",
            reply_id=f"write-{tag}-{n}:1:{AGENTS[n % len(AGENTS)]}",
            trigger_id=f"write-{tag}-{n}",
            now=NOW + timedelta(seconds=n),
        )
        started = time.perf_counter()
        report = writer.apply(parse_markers(reply).markers, origin)
        samples.since(started)
        for label in (*(s.action for s in report.saved), *(r.reason for r in report.rejected)):
            outcomes[label] = outcomes.get(label, 0) + 1
    return {**samples.summary(), "outcomes": outcomes}


def measure_recall(settings: Settings, engine: Any, corpus: Corpus, count: int) -> Any:
    """``count`` questions through ``Recaller.recall`` with the settings' recall layers."""
    recaller = Recaller(SessionMemory(engine))
    wiring = Wiring(settings, engine)
    team = wiring.team
    samples = Samples()
    returned = 0
    for n in range(count):
        agent = team.agents[n % len(team.agents)]
        config = wiring.tuning.recall(agent)
        query = corpus.question()
        group = f"g{corpus.rng.randrange(GROUPS)}"
        started = time.perf_counter()
        result = recaller.recall(query, group=group, agent=agent.id, config=config, now=NOW)
        samples.since(started)
        returned += len(result.snippets)
    return {**samples.summary(), "snippets_per_query": round(returned / max(count, 1), 2)}


def add_history(engine: Any, corpus: Corpus, count: int) -> float:
    """``count`` messages in ``CONTEXT_GROUP``: people's questions and agents' replies."""
    store = HistoryStore(engine)
    counter = TokenCounter()
    began = time.perf_counter()
    for n in range(count):
        agent_turn = n % 2 == 1
        text = f"{corpus.memory()[1]} {corpus.memory()[1]}" if agent_turn else corpus.question()
        message = ChatMessage(
            id=f"history-{n}",
            group=CONTEXT_GROUP,
            sender=AGENTS[n % len(AGENTS)] if agent_turn else "alice",
            kind=MessageKind.AGENT if agent_turn else MessageKind.HUMAN,
            text=text,
            created_at=NOW - timedelta(seconds=(count - n) * 30),
            in_reply_to=f"history-{n - 1}" if agent_turn else None,
            hop=1 if agent_turn else 0,
        )
        _save(store, message, status="done", tokens=counter.count(text))
    return time.perf_counter() - began


def measure_context(settings: Settings, engine: Any, corpus: Corpus, count: int) -> Any:
    """Build a turn's context ``count`` times, as ``Pipeline`` does: gather, then build."""
    wiring = Wiring(settings, engine)
    team = wiring.team
    # As the daemon runs it: recent messages kept in memory, written through by each turn.
    store = wiring.history
    recent = RecentMessages(store, settings.history_limit)
    briefing = wiring.briefing(recent)
    prompts = wiring.prompts
    counter = wiring.counter
    gather, build, total = Samples(), Samples(), Samples()
    history_tokens: list[int] = []
    for n in range(count):
        agent = team.agents[n % len(team.agents)]
        trigger = ChatMessage(
            id=f"context-trigger-{n}",
            group=CONTEXT_GROUP,
            sender="alice",
            kind=MessageKind.HUMAN,
            text=corpus.question(),
            created_at=NOW,
        )
        recent.remember(asyncio.run(store.open(trigger, count=counter.count)).stored)
        started = time.perf_counter()
        gathered = briefing.gather(agent, trigger, NOW)
        gather.since(started)
        building = time.perf_counter()
        built = build_context(
            agent=agent,
            agents=team.agents,
            layers=gathered.layers,
            trigger=trigger,
            prompts=prompts,
            now=NOW.astimezone(wiring.tuning.zone),
            limits=wiring.tuning.limits(agent),
            transcript=wiring.transcript,
        )
        build.since(building)
        total.since(started)
        history_tokens.append(built.report.tokens.history)
    return {
        **total.summary(),
        "gather": gather.summary(),
        "build": build.summary(),
        "history_window": settings.history_limit,
        "history_tokens_median": sorted(history_tokens)[len(history_tokens) // 2],
    }


# ---------------------------------------------------------------------------------- history


def _message_row(corpus: Corpus, n: int, group: str) -> dict[str, Any]:
    """The n-th bulk message: a person's question, or an agent's reply (every other one)."""
    agent_turn = n % 2 == 1
    text = f"{corpus.memory()[1]} {corpus.memory()[1]}" if agent_turn else corpus.question()
    return {
        "id": f"bulk-{n}",
        "group_id": group,
        "sender": AGENTS[n % len(AGENTS)] if agent_turn else "alice",
        "kind": "agent" if agent_turn else "human",
        "text": text,
        "in_reply_to": None,
        "hop": 1 if agent_turn else 0,
        "created_at": NOW - timedelta(days=365) + timedelta(seconds=n * 3),
        "status": "done",
    }


def fill_history(engine: Engine, corpus: Corpus, start: int, stop: int, spread: bool) -> float:
    """Messages ``start`` to ``stop``: all in the large group, or (``spread``) over 200 others."""
    table = MessageRow.__table__  # type: ignore[attr-defined]
    began = time.perf_counter()
    n = start
    while n < stop:
        upto = min(stop, n + BATCH)
        rows = [
            _message_row(corpus, i, f"h{i % GROUPS}" if spread else HISTORY_GROUP)
            for i in range(n, upto)
        ]
        with engine.begin() as conn:
            conn.execute(sqlite_insert(table), rows)
        if upto // PROGRESS_EVERY > n // PROGRESS_EVERY or upto == stop:
            rate = (upto - start) / max(time.perf_counter() - began, 1e-9)
            print(f"  stored {upto:>9,} messages ({rate:,.0f}/s)", flush=True)
        n = upto
    return time.perf_counter() - began


def measure_history_recall(
    settings: Settings, engine: Engine, corpus: Corpus, count: int, groups: list[str]
) -> dict[str, Any]:
    """``count`` questions, each to one of ``groups``, through the daemon's recaller."""
    wiring = Wiring(settings, engine)
    team = wiring.team
    store = wiring.history
    window = {g: store.recent(g, HISTORY_WINDOW) for g in groups}
    before = {g: w[0].seq if w else None for g, w in window.items()}
    samples = Samples()
    found = 0
    for n in range(count):
        agent = team.agents[n % len(team.agents)]
        group = groups[n % len(groups)]
        config = wiring.tuning.recall(agent)
        query = corpus.question()
        started = time.perf_counter()
        result = wiring.recaller.recall(
            query, group=group, agent=agent.id, config=config, now=NOW, before_seq=before[group]
        )
        samples.since(started)
        found += len(result.messages)
    return {**samples.summary(), "messages_per_query": round(found / max(count, 1), 2)}


def _trigger_sql(engine: Engine) -> str:
    with engine.connect() as conn:
        row = conn.execute(
            sql_text("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = :name"),
            {"name": INSERT_TRIGGER},
        ).first()
    if row is None:
        raise RuntimeError(f"no trigger {INSERT_TRIGGER}: is the history index installed?")
    return str(row[0])


def measure_index_cost(engine: Engine, corpus: Corpus, count: int) -> dict[str, Any]:
    """Messages stored one by one, in alternating blocks with and without the index trigger."""
    store = HistoryStore(engine)
    create = _trigger_sql(engine)
    samples = {True: Samples(), False: Samples()}
    for block in range(max(2, count // INSERT_BLOCK)):
        indexed = block % 2 == 0
        if not indexed:
            with engine.begin() as conn:
                conn.execute(sql_text(f"DROP TRIGGER {INSERT_TRIGGER}"))
        for i in range(INSERT_BLOCK):
            n = block * INSERT_BLOCK + i
            row = _message_row(corpus, n, f"h{corpus.rng.randrange(GROUPS)}")
            message = ChatMessage(
                id=f"insert-{n}",
                group=row["group_id"],
                sender=row["sender"],
                kind=MessageKind(row["kind"]),
                text=row["text"],
                created_at=NOW + timedelta(seconds=n),
            )
            started = time.perf_counter()
            _save(store, message)
            samples[indexed].since(started)
        if not indexed:
            with engine.begin() as conn:
                conn.execute(sql_text(create))
    with_index, without = samples[True].summary(), samples[False].summary()
    return {
        "with_index": with_index,
        "without_index": without,
        "added_p50_ms": round(with_index["p50_ms"] - without["p50_ms"], 3),
        "added_p95_ms": round(with_index["p95_ms"] - without["p95_ms"], 3),
    }


def run_history(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The history case, on a database of its own."""
    settings = _settings(folder, "history.db")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    corpus = Corpus(args.seed + 1)
    group_rows = min(args.history_group_rows, args.history_rows)
    try:
        print(f"history: {group_rows:,} messages in one group", flush=True)
        fill_group_s = fill_history(engine, corpus, 0, group_rows, spread=False)
        group = measure_history_recall(settings, engine, corpus, args.queries, [HISTORY_GROUP])
        print(f"history: up to {args.history_rows:,} messages in the store", flush=True)
        fill_rest_s = fill_history(engine, corpus, group_rows, args.history_rows, spread=True)
        big = measure_history_recall(settings, engine, corpus, args.queries, [HISTORY_GROUP])
        others = [f"h{corpus.rng.randrange(GROUPS)}" for _ in range(20)]
        small = measure_history_recall(settings, engine, corpus, args.queries, others)
        print(f"history: {args.inserts} messages stored one by one", flush=True)
        index = measure_index_cost(engine, corpus, args.inserts)
    finally:
        engine.dispose()
    return {
        "group_rows": group_rows,
        "store_rows": args.history_rows,
        "fill_s": round(fill_group_s + fill_rest_s, 1),
        "group": group,
        "store_large_group": big,
        "store_other_groups": small,
        "store_p95_ms": max(big["p95_ms"], small["p95_ms"]),
        "index": index,
    }


def history_verdicts(history: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [
        (
            f"history recall p95, {history['group_rows']:,} in a group",
            "group",
            history["group"]["p95_ms"],
        ),
        (f"history recall p95, {history['store_rows']:,} stored", "store", history["store_p95_ms"]),
    ]
    verdicts = [
        {
            "target": label,
            "limit_ms": HISTORY_TARGETS_MS[key],
            "measured_ms": value,
            "verdict": _verdict(value, HISTORY_TARGETS_MS[key]),
        }
        for label, key, value in rows
    ]
    added = history["index"]["added_p95_ms"]
    verdicts.append(
        {
            "target": "indexing added to a store p95",
            "limit_ms": INDEX_TARGET_MS,
            "measured_ms": added,
            "verdict": _verdict(added, INDEX_TARGET_MS),
        }
    )
    return verdicts


def print_history(history: dict[str, Any]) -> None:
    g, big, small = history["group"], history["store_large_group"], history["store_other_groups"]
    index = history["index"]
    print(
        f"history recall ({history['fill_s']} s to store): {history['group_rows']:,} messages in "
        f"one group: p50 {g['p50_ms']:.2f} ms, p95 {g['p95_ms']:.2f} ms; "
        f"{history['store_rows']:,} stored: that group p95 {big['p95_ms']:.2f} ms, "
        f"other groups p95 {small['p95_ms']:.2f} ms"
    )
    w, wo = index["with_index"], index["without_index"]
    print(
        f"storing a message: with the index p50 {w['p50_ms']:.3f} / p95 {w['p95_ms']:.3f} ms, "
        f"without p50 {wo['p50_ms']:.3f} / p95 {wo['p95_ms']:.3f} ms "
        f"(added p95 {index['added_p95_ms']:.3f} ms)"
    )


# ---------------------------------------------------------------------------------- report


def _verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "MISSED"


def _label(size: int) -> str:
    return f"{size // 1_000_000}m" if size % 1_000_000 == 0 else f"{size // 1000}k"


def _settings(folder: Path, database: str = "arena.db") -> Settings:
    workspaces = folder / "workspaces"
    copy_workspaces(workspaces, memory=True)
    return load_settings(
        data_dir=folder / "data",
        agents_dir=REPO / "agents",
        workspaces_dir=workspaces,
        prompts_dir=REPO / "prompts",
        database_url=f"sqlite:///{folder / 'data' / database}",
        anthropic_api_key=None,
        log_level="WARNING",
    )


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    settings = _settings(folder)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    memory = SessionMemory(engine)
    corpus = Corpus(args.seed)
    rows: list[dict[str, Any]] = []
    context: dict[str, Any] | None = None
    filled = 0
    try:
        for size in args.sizes:
            print(f"size {size:,}: filling from {filled:,}", flush=True)
            filling = fill(engine, corpus, filled, size)
            filled = size
            print(f"size {size:,}: {args.writes} writes, {args.queries} recalls", flush=True)
            write = measure_writes(settings, engine, corpus, args.writes, _label(size))
            recall = measure_recall(settings, engine, corpus, args.queries)
            entries = memory.stats()["total"]
            rows.append(
                {"size": size, "entries": entries, **filling, "write": write, "recall": recall}
            )
            if context is None:
                print(f"context: {args.history:,} history messages in one group", flush=True)
                history_s = add_history(engine, corpus, args.history)
                context = {
                    "history_messages": args.history,
                    "memory_entries": entries,
                    "history_fill_s": round(history_s, 1),
                    **measure_context(settings, engine, corpus, args.contexts),
                }
    finally:
        engine.dispose()
    return {"sizes": rows, "context": context}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: sorted(int(x) for x in s.split(",") if x),
        default=[10_000, 100_000, 1_000_000],
        help="store sizes, comma-separated (default 10000,100000,1000000)",
    )
    parser.add_argument("--queries", type=int, default=300, help="recalls per size")
    parser.add_argument("--writes", type=int, default=300, help="writes per size")
    parser.add_argument("--history", type=int, default=10_000, help="messages in the group")
    parser.add_argument("--contexts", type=int, default=200, help="context builds")
    parser.add_argument(
        "--history-rows", type=int, default=1_000_000, help="messages stored (0: no history case)"
    )
    parser.add_argument(
        "--history-group-rows", type=int, default=100_000, help="messages in the large group"
    )
    parser.add_argument("--inserts", type=int, default=1000, help="messages stored one by one")
    parser.add_argument("--seed", type=int, default=20250601)
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()


def _last_line(
    results: dict[str, Any], write_p95: float, summary: dict[str, float]
) -> dict[str, float]:
    line = {"write_p95_ms": write_p95, **summary} if results["sizes"] else {}
    if results["context"]:
        line["context_p95_ms"] = results["context"]["p95_ms"]
    if history := results.get("history"):
        line["history_recall_p95_ms_group"] = history["group"]["p95_ms"]
        line["history_recall_p95_ms_store"] = history["store_p95_ms"]
        line["index_insert_p95_added_ms"] = history["index"]["added_p95_ms"]
    return line


def main() -> int:
    args = parse_args()
    machine = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="arena-memory-scale-") as tmp:
        results = run(args, Path(tmp)) if args.sizes else {"sizes": [], "context": None}
        if args.history_rows > 0:
            results["history"] = run_history(args, Path(tmp))
    elapsed = time.perf_counter() - began
    print()
    print(f"memory at scale ({machine}; SQLite WAL in a temporary folder)")
    print(
        f"filled in bulk (entries.new_row rows, {BATCH:,} per executemany, FTS by trigger) "
        f"(94% session in {GROUPS} groups, 5% personal, 1% global)"
    )
    head = f"{'size':>10} {'fill s':>8} {'write p50':>10} {'write p95':>10} "
    print(head + f"{'recall p50':>11} {'recall p95':>11} {'target':>8}  verdict")
    summary: dict[str, float] = {}
    verdicts: list[dict[str, Any]] = []
    write_p95 = 0.0
    for row in results["sizes"]:
        w, r = row["write"], row["recall"]
        write_p95 = max(write_p95, w["p95_ms"])
        target = RECALL_TARGETS_MS.get(row["size"])
        verdict = _verdict(r["p95_ms"], target) if target else "-"
        print(
            f"{row['size']:>10,} {row['fill_s']:>8} {w['p50_ms']:>10.2f} {w['p95_ms']:>10.2f} "
            f"{r['p50_ms']:>11.2f} {r['p95_ms']:>11.2f} {target or '-':>8}  {verdict}"
        )
        summary[f"recall_p95_ms_{_label(row['size'])}"] = r["p95_ms"]
        if target:
            verdicts.append(
                {
                    "target": f"recall p95 at {row['size']:,}",
                    "limit_ms": target,
                    "measured_ms": r["p95_ms"],
                    "verdict": verdict,
                }
            )
    print(
        "write outcomes: "
        + "; ".join(f"{_label(row['size'])} {row['write']['outcomes']}" for row in results["sizes"])
    )
    if results["sizes"]:
        verdicts.insert(
            0,
            {
                "target": "write p95 (worst size)",
                "limit_ms": WRITE_TARGET_MS,
                "measured_ms": write_p95,
                "verdict": _verdict(write_p95, WRITE_TARGET_MS),
            },
        )
    context = results["context"]
    if context:
        print(
            f"context build, {context['history_messages']:,} history messages "
            f"(window {context['history_window']}), {context['memory_entries']:,} memories: "
            f"p50 {context['p50_ms']:.2f} ms, p95 {context['p95_ms']:.2f} ms "
            f"(gather p95 {context['gather']['p95_ms']:.2f}, "
            f"build p95 {context['build']['p95_ms']:.2f})"
        )
        verdicts.append(
            {
                "target": "context build p95",
                "limit_ms": CONTEXT_TARGET_MS,
                "measured_ms": context["p95_ms"],
                "verdict": _verdict(context["p95_ms"], CONTEXT_TARGET_MS),
            },
        )
    history = results.get("history")
    if history:
        print_history(history)
        verdicts += history_verdicts(history)
    print(f"{'target':<40} {'limit ms':>9} {'measured ms':>12}  verdict")
    for v in verdicts:
        print(f"{v['target']:<40} {v['limit_ms']:>9} {v['measured_ms']:>12.2f}  {v['verdict']}")
    print(f"total run time {elapsed:.0f} s")
    if args.json:
        report = {
            "machine": machine,
            "elapsed_s": round(elapsed, 1),
            **results,
            "targets": verdicts,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    line = _last_line(results, write_p95, summary)
    print(" ".join(f"{k}={v:.2f}" for k, v in line.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
