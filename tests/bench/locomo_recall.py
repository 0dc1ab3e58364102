"""Recall quality on LoCoMo-format conversations, through the project's own store and recall.

    python tests/bench/locomo_recall.py --data FILE [--json OUT] [--limit-conversations N]
                                        [--no-embeddings] [--ingest history|memory|both]

Each conversation goes into a group of its own, one of two ways (``--ingest both``, the
default, measures both and reports them side by side):

    history   the real path: every turn is a person's message in the group's history, stored
              as ``arena import`` stores it (its speaker as sender, the text as said, dated by
              its session), and indexed by the history index as every stored message is
    memory    the earlier figure: every turn becomes a session memory entry written with
              ``SessionMemory.write_many`` (the turn's text and the caption of a shared photo
              as content; the speaker, the session date and the neighbouring turns as
              metadata in ``extra``, searchable as such), a path the daemon never takes

Each question of categories 1-4 then goes through ``Recaller.recall`` (with the history index,
as the daemon builds it) for its own group, with an evaluation config: no relevance floor,
10 entries, no character budget, so the ranking itself is measured.

Metrics, per question with valid evidence: recall@k is the share of its evidence turns among
the turns of the top k entries (a memory that absorbed a duplicate turn stands for both; a
recalled message stands for itself and the message shown before it, as the agent sees both);
MRR@10 is the reciprocal rank of the first entry holding an evidence turn. Evidence ids are
normalised when unambiguous ("D8:6; D9:17" is two ids, "D:11:26" is D11:26, "D30:05" is
D30:5); ids naming no turn are skipped and counted. Prints a table, the ingest and per-query
times, writes JSON with --json, and ends with one line
``overall recall@1=… recall@5=… recall@10=… mrr@10=…`` for the first path measured (history
by default), followed by ``memory_recall@5=… memory_recall@10=…`` when both are.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import Engine

from orchestrator.memory.conversation.importer import ImportSettings, imported_id, parse_lines
from orchestrator.memory.conversation.importing import import_messages
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.recall.recaller import RecallConfig, Recaller, RecallResult
from orchestrator.memory.session.embeddings import load_embedder
from orchestrator.memory.session.store import Citation, NewMemory, SessionMemory

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)
EVAL_CONFIG = RecallConfig(
    relevance_floor=0.0, max_entries=10, char_budget=10**9, require_source=False, candidates=50
)
NOW = datetime(2025, 1, 1, tzinfo=UTC)
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    date: str
    session: int
    said: str  # what was typed: the text without the photo's caption


def turns_of(conversation: dict[str, Any]) -> list[Turn]:
    """Every turn of a conversation, in order, with its session's date."""
    sessions = []
    for name, value in conversation.items():
        match = re.fullmatch(r"session_(\d+)", name)
        if match and isinstance(value, list):
            sessions.append((int(match.group(1)), value))
    turns = []
    for number, session in sorted(sessions):
        date = str(conversation.get(f"session_{number}_date_time", ""))
        for turn in session:
            said = text = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            turns.append(Turn(str(turn["dia_id"]), str(turn["speaker"]), text, date, number, said))
    return turns


def evidence_ids(evidence: list[str], known: set[str]) -> tuple[set[str], int]:
    """The question's evidence turn ids that exist, and how many given ids were skipped."""
    found: set[str] = set()
    skipped = 0
    for item in evidence:
        ids = [f"D{int(s)}:{int(t)}" for s, t in _EVIDENCE_RE.findall(str(item))]
        if not ids:
            skipped += 1
        for dia_id in ids:
            if dia_id in known:
                found.add(dia_id)
            else:
                skipped += 1
    return found, skipped


def _context(turns: list[Turn], i: int) -> str:
    around = [j for j in (i - 1, i + 1) if 0 <= j < len(turns)]
    return " / ".join(
        f"{turns[j].speaker}: {turns[j].text}"
        for j in around
        if turns[j].session == turns[i].session
    )


def memories_of(sample_id: str, group: str, turns: list[Turn]) -> Iterator[NewMemory]:
    for i, turn in enumerate(turns):
        ref = f"{sample_id}:{turn.dia_id}"
        yield NewMemory(
            scope="session",
            scope_id=group,
            type="context",
            content=turn.text,
            now=NOW,
            confidence=0.9,
            agent=turn.speaker,
            group_id=group,
            source_message_id=ref,
            citation=Citation(kind="dialog", ref=turn.dia_id, locator=ref, scope="session"),
            written_by="import",
            extra={
                "dia_id": turn.dia_id,
                "speaker": turn.speaker,
                "date": turn.date,
                "session": turn.session,
                "context": _context(turns, i),
            },
        )


TURN_OFFSET_S = 30  # within a session, as tests/bench/long_chat.py dates the turns


def _session_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def history_file(sample_id: str, turns: list[Turn]) -> bytes:
    """The conversation as ``arena import`` reads it (one JSON object per line)."""
    lines = []
    offset = 0
    for n, turn in enumerate(turns):
        offset = 0 if n == 0 or turns[n - 1].session != turn.session else offset + 1
        at = _session_time(turn.date) + timedelta(seconds=TURN_OFFSET_S * offset)
        row = {
            "id": f"{sample_id}-{turn.dia_id}",
            "sender": turn.speaker,
            "text": turn.said,
            "created_at": at.isoformat(),
        }
        lines.append(json.dumps(row, ensure_ascii=False))
    return ("\n".join(lines) + "\n").encode("utf-8")


class HistoryIngest:
    """Turns as messages of the group's history, through the import path."""

    def __init__(self, engine: Engine) -> None:
        self.store = HistoryStore(engine)

    def ingest(self, sample_id: str, group: str, turns: list[Turn]) -> dict[str, set[str]]:
        """Store the turns; each message id -> the dia_ids it stands for."""
        config = ImportSettings(group=group, zone=UTC, max_bytes=10**6, now=NOW)
        import_messages(self.store, parse_lines(history_file(sample_id, turns), config))
        return {imported_id(group, f"{sample_id}-{t.dia_id}"): {t.dia_id} for t in turns}

    @staticmethod
    def ranked(result: RecallResult, ids: dict[str, set[str]]) -> list[set[str]]:
        """Each hit's turn (the question quoted with a short answer is not the whole turn)."""
        return [ids.get(m.said.id, set()) for m in result.messages]


class MemoryIngest:
    """Turns as session memory entries (the earlier figure's path)."""

    def __init__(self, memory: SessionMemory) -> None:
        self.memory = memory

    def ingest(self, sample_id: str, group: str, turns: list[Turn]) -> dict[int, set[str]]:
        outcomes = self.memory.write_many(list(memories_of(sample_id, group, turns)))
        dia_ids: dict[int, set[str]] = {}
        for turn, outcome in zip(turns, outcomes, strict=True):
            dia_ids.setdefault(outcome.record.id, set()).add(turn.dia_id)
        return dia_ids

    @staticmethod
    def ranked(result: RecallResult, ids: dict[int, set[str]]) -> list[set[str]]:
        return [ids.get(s.id, set()) for s in result.snippets]


def _group(sample_id: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", sample_id.lower()).strip("-")[:64] or "conversation"


def _score(ranked: list[set[str]], evidence: set[str]) -> dict[str, float]:
    scores = {f"recall@{k}": len(evidence & set().union(*ranked[:k])) / len(evidence) for k in KS}
    first = next((n for n, ids in enumerate(ranked[:10], 1) if ids & evidence), None)
    scores["mrr@10"] = 1.0 / first if first else 0.0
    return scores


def run(data: list[dict[str, Any]], recaller: Recaller, ingest: Any) -> dict[str, Any]:
    per_question: list[dict[str, Any]] = []
    query_ms: list[float] = []
    ingest_s = 0.0
    counts = {"turns": 0, "entries": 0, "questions": 0, "skipped_questions": 0, "skipped_ids": 0}
    for conversation in data:
        sample_id = str(conversation["sample_id"])
        group = _group(sample_id)
        turns = turns_of(conversation["conversation"])
        start = time.perf_counter()
        dia_ids = ingest.ingest(sample_id, group, turns)
        ingest_s += time.perf_counter() - start
        counts["turns"] += len(turns)
        counts["entries"] += len(dia_ids)
        known = {t.dia_id for t in turns}
        for qa in conversation["qa"]:
            category = qa.get("category")
            if category not in CATEGORIES:
                continue
            evidence, skipped = evidence_ids(qa.get("evidence", []), known)
            counts["skipped_ids"] += skipped
            if not evidence:
                counts["skipped_questions"] += 1
                continue
            start = time.perf_counter()
            result = recaller.recall(
                str(qa["question"]), group=group, agent="bench", config=EVAL_CONFIG, now=NOW
            )
            query_ms.append((time.perf_counter() - start) * 1000)
            ranked = ingest.ranked(result, dia_ids)
            per_question.append({"category": category, **_score(ranked, evidence)})
        counts["questions"] = len(per_question)
    return {
        "counts": counts,
        "ingest_s": ingest_s,
        "query_ms": query_ms,
        "per_question": per_question,
    }


def measure(data: list[dict[str, Any]], path: str, embedder: Any) -> dict[str, Any]:
    """One ingest path, from an empty database."""
    with tempfile.TemporaryDirectory(prefix="locomo-") as folder:
        engine = make_engine(f"sqlite:///{folder}/memory.db")
        try:
            memory = SessionMemory(engine, embedder=embedder)
            recaller = Recaller(memory, history=HistoryIndex(engine))
            ingest = HistoryIngest(engine) if path == "history" else MemoryIngest(memory)
            return run(data, recaller, ingest)
        finally:
            engine.dispose()


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    metrics = [f"recall@{k}" for k in KS] + ["mrr@10"]
    summary = {m: round(statistics.fmean(r[m] for r in rows), 3) if rows else 0.0 for m in metrics}
    return {"questions": len(rows), **summary}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _table(console: Console, path: str, results: dict[str, Any]) -> dict[str, Any]:
    """Print one path's table and timing; its figures for the JSON report."""
    rows = results["per_question"]
    overall = summarise(rows)
    by_category = {
        CATEGORIES[c]: summarise([r for r in rows if r["category"] == c]) for c in CATEGORIES
    }
    table = Table("category", "questions", *[f"R@{k}" for k in KS], "MRR@10", title=PATHS[path])
    for name, summary in [*by_category.items(), ("overall", overall)]:
        values = [f"{summary[f'recall@{k}']:.3f}" for k in KS] + [f"{summary['mrr@10']:.3f}"]
        table.add_row(name, str(summary["questions"]), *values)
    console.print(table)
    counts, query_ms = results["counts"], results["query_ms"]
    timing = {
        "ingest_s": round(results["ingest_s"], 3),
        "ingest_turns_per_s": round(counts["turns"] / max(results["ingest_s"], 1e-9), 1),
        "query_p50_ms": round(_percentile(query_ms, 0.5), 2),
        "query_p95_ms": round(_percentile(query_ms, 0.95), 2),
    }
    console.print(
        f"ingest {timing['ingest_s']} s ({timing['ingest_turns_per_s']} turns/s); "
        f"query p50 {timing['query_p50_ms']} ms, p95 {timing['query_p95_ms']} ms"
    )
    return {"counts": counts, "overall": overall, "by_category": by_category, "timing": timing}


PATHS = {
    "history": "history: turns stored as the group's messages (the real path)",
    "memory": "memory: turns written as session memory entries (the earlier figure)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument("--no-embeddings", action="store_true", help="full text only")
    parser.add_argument("--ingest", choices=("history", "memory", "both"), default="both")
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))[: args.limit_conversations]
    console = Console()
    embedder = None if args.no_embeddings else load_embedder()
    mode = "full text + embeddings" if embedder else "full text (BM25)"
    paths = ["history", "memory"] if args.ingest == "both" else [args.ingest]
    reports = {path: measure(data, path, embedder) for path in paths}
    counts = reports[paths[0]]["counts"]
    console.print(
        f"LoCoMo recall on {args.data.name}: {len(data)} conversations, {counts['turns']} turns, "
        f"{counts['questions']} questions of categories 1-4 "
        f"({counts['skipped_questions']} without valid evidence skipped, "
        f"{counts['skipped_ids']} evidence ids skipped)"
    )
    console.print(
        f"retrieval: {mode}; evaluation config: relevance floor 0, top 10, no char budget"
    )
    figures = {path: _table(console, path, reports[path]) for path in paths}
    if args.json:
        report = {
            "data": str(args.data),
            "retrieval": mode,
            "config": {"relevance_floor": 0.0, "max_entries": 10, "char_budget": None},
            **figures[paths[0]],
            "paths": figures,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    overall = figures[paths[0]]["overall"]
    line = (
        f"overall recall@1={overall['recall@1']:.3f} recall@5={overall['recall@5']:.3f} "
        f"recall@10={overall['recall@10']:.3f} mrr@10={overall['mrr@10']:.3f}"
    )
    if len(paths) == 2:
        old = figures["memory"]["overall"]
        line += f" memory_recall@5={old['recall@5']:.3f} memory_recall@10={old['recall@10']:.3f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
