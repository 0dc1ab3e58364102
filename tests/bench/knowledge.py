"""Knowledge sources: is the passage a question needs found, and given to the agent; what it
costs in tokens; how fast the chunks are searched and kept fresh as a source grows.

    python tests/bench/knowledge.py [--docs tests/bench/data/knowledge/starlette]
        [--questions tests/bench/data/knowledge/starlette.questions.jsonl]
        [--scale 10000,100000] [--searches 200] [--agent architect] [--seed S] [--json OUT]

Works on SQLite databases in a temporary folder, with the repository's ``agents/`` and
``prompts/`` and the offline model's settings; nothing outside the repository is needed.

Finding the passage. The documentation folder (``--docs``, by default Starlette's docs, 27
files) is added as a knowledge source of one group and indexed (``Indexer.sync``: files per
second, chunks per second, chunks), then, when the model's weights are installed, its chunks
are embedded as a running daemon embeds them (``embed_pending``, chunks per second). Each
question of ``--questions`` (one JSON object a line: ``id``, ``question``, ``file`` relative to
the folder, ``lines`` ``[first, last]``) is then asked twice:

- search: the candidates as recall ranks them (by words, and by meaning when embeddings are
  on; the scopes a turn of ``--agent`` in the group sees), the top 10. A question is found at
  k when one of the first k is a chunk of the expected file whose lines overlap the expected
  lines: recall@5 and recall@10 (target recall@5 >= 0.8).
- context: ``preview``, the context ``arena context AGENT GROUP --message QUESTION`` shows,
  built as a turn builds it. The passages given are the report's citations of knowledge; the
  question is found when one of them overlaps (recall at k = the passages given, at most
  ``RecallConfig.knowledge_entries``; target >= 0.8). Its knowledge tokens per call are the
  passages' tokens as rendered in the references (header and quoted lines, counted with
  ``TokenCounter``) and, beside them, the chunks' own tokens (target p95 <= 1,500 as
  rendered).

The questions missed (at 5, and in the context) are printed with the top three locators the
search gave instead.

At scale. For each size of ``--scale`` (chunks), a synthetic source is written to a fresh
database: Markdown files of 8 to 30 sections, each section one chunk (mostly), each file
written after one of the documentation's documents, chosen by size: its headings, sections as
long as its own, prose from a word-bigram model of its prose (a word in thirty a generated
project name), now and then one of its code blocks; deterministic with ``--seed``. It is
indexed (files/s, chunks/s); the share of its chunks a question's words match is reported
(the search scores every match); then ``--searches`` searches, the questions in turn, are
timed as a turn issues them: the store's search (limit ``RecallConfig.candidates``) and
``find_passages`` (that search, the relevance and the limits): p50 and p95 ms. Then one file
is changed (a paragraph appended, its mtime moved on) and the whole source is synced, three
times with three files, and once with nothing changed (target: a changed file in a 10k-chunk
source synced in < 1 s).

Prints a table, writes JSON with ``--json``, and ends with one line of ``key=value`` pairs,
``recall_at_5=…`` first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text as sql_text

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.core.chunking import parse_locator  # noqa: E402
from orchestrator.core.context.tokens import TokenCounter  # noqa: E402
from orchestrator.memory.db import make_engine  # noqa: E402
from orchestrator.memory.knowledge.embedding import embed_pending  # noqa: E402
from orchestrator.memory.knowledge.indexer import Progress  # noqa: E402
from orchestrator.memory.knowledge.store import KnowledgeStore, Source, turn_scopes  # noqa: E402
from orchestrator.memory.knowledge.tables import knowledge_key  # noqa: E402
from orchestrator.memory.recall.passages import find_passages, ranked_candidates  # noqa: E402
from orchestrator.memory.session.fts import fts5_phrase, query_terms  # noqa: E402
from orchestrator.runtime.preview import next_trigger, preview  # noqa: E402
from orchestrator.runtime.wiring import Wiring  # noqa: E402
from orchestrator.settings import Settings, load_settings  # noqa: E402
from tests.bench.daemon_env import copy_workspaces  # noqa: E402

DATA = REPO / "tests" / "bench" / "data" / "knowledge"
GROUP = "docs"
SEARCH_LIMIT = 10
RECALL_TARGET = 0.8  # recall@5 at least
TOKENS_TARGET = 1500  # knowledge tokens per call, p95, at most
REINDEX_TARGET_S = 1.0  # one changed file in a 10k-chunk source, at most
REINDEX_SIZE = 10_000  # the source size the re-index target is for
REINDEX_ROUNDS = 3


# ---------------------------------------------------------------------------------- questions


@dataclass(frozen=True, slots=True)
class Question:
    qid: str
    question: str
    file: str
    first: int
    last: int


def load_questions(path: Path) -> list[Question]:
    """The questions of a JSONL file.

    Raises:
        ValueError: a line that is not an object with ``id``, ``question``, ``file`` and
            ``lines`` ``[first, last]`` (its number and what is wrong).
    """
    questions = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            first, last = (int(x) for x in obj["lines"])
            if not 1 <= first <= last:
                raise ValueError(f"lines {first}-{last} are not a range from 1")
            fields = (str(obj["id"]), str(obj["question"]), str(obj["file"]))
        except (ValueError, KeyError, TypeError) as exc:
            what = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(
                f"{path}:{n}: want {{id, question, file, lines: [first, last]}} ({what})"
            ) from None
        questions.append(Question(*fields, first, last))
    if not questions:
        raise ValueError(f"{path}: no questions")
    return questions


def _hits_passage(locator: str, q: Question, source: str) -> bool:
    """Whether ``locator`` is a chunk of the question's file overlapping its lines."""
    found = parse_locator(locator)
    return found.path == f"{source}/{q.file}" and found.start <= q.last and found.end >= q.first


def matched_share(
    store: KnowledgeStore, questions: Sequence[Question], scopes: Sequence[tuple[str, str]]
) -> float:
    """The mean share of the scopes' chunks a question's search matches (its words OR-ed, as
    ``KnowledgeStore.search`` builds the SQLite query), before the ranking keeps the best."""
    keys = " OR ".join(f'"{knowledge_key(scope, scope_id)}"' for scope, scope_id in scopes)
    total = f"scope : ({keys})"
    shares = []
    with store.engine.connect() as conn:
        count = sql_text("SELECT count(*) FROM knowledge_fts WHERE knowledge_fts MATCH :match")
        chunks = conn.execute(count, {"match": total}).scalar_one()
        for q in questions:
            words = " OR ".join(fts5_phrase(t) for t in query_terms(q.question))
            found = conn.execute(count, {"match": f"{total} AND ({words})"}).scalar_one()
            shares.append(found / max(chunks, 1))
    return round(statistics.fmean(shares), 3) if shares else 0.0


# ---------------------------------------------------------------------------------- timing


def _pct(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    ordered = sorted(v * 1000 for v in values_s)
    return {
        "p50_ms": round(_pct(ordered, 0.50), 2),
        "p95_ms": round(_pct(ordered, 0.95), 2),
        "max_ms": round(ordered[-1], 2) if ordered else 0.0,
        "samples": len(ordered),
    }


# ---------------------------------------------------------------------------------- set-up


def _settings(folder: Path, embeddings: str = "auto") -> Settings:
    workspaces = folder / "workspaces"
    copy_workspaces(workspaces, memory=True)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    return load_settings(
        data_dir=folder / "data",
        agents_dir=REPO / "agents",
        workspaces_dir=workspaces,
        prompts_dir=REPO / "prompts",
        database_url=f"sqlite:///{folder / 'data' / 'arena.db'}",
        anthropic_api_key=None,
        log_level="WARNING",
        knowledge_embeddings=embeddings,
    )


def _index(
    wiring: Wiring, name: str, root: Path, label: str
) -> tuple[Source, dict[str, float | int]]:
    """Add ``root`` as a source of the group and index it; the source and how fast."""
    added = wiring.knowledge.add(
        name=name,
        kind="folder",
        root=root,
        scope="group",
        scope_id=GROUP,
        trust="trusted",
        now=datetime.now(UTC),
    )
    shown = [0]

    def progress(p: Progress) -> None:
        tenth = p.done * 10 // p.total
        if p.total >= 1000 and tenth > shown[0]:
            shown[0] = tenth
            print(f"  {label}: indexed {p.done:,} of {p.total:,} files", flush=True)

    began = time.perf_counter()
    report = wiring.indexer.sync(added, now=datetime.now(UTC), progress=progress)
    seconds = time.perf_counter() - began
    if report.problems:
        print(f"  {label}: {len(report.problems)} problems, first: {report.problems[0]}")
    source = wiring.knowledge.get(name)
    assert source is not None
    embedded, embed_s = 0, 0.0
    if wiring.knowledge_vectors is not None:  # as a daemon does it afterwards, in batches
        began = time.perf_counter()
        while done := embed_pending(wiring.engine, wiring.knowledge_vectors, source=name):
            embedded += done
            if embedded % 200 < done:
                print(f"  {label}: embedded {embedded:,} of {source.chunks:,} chunks", flush=True)
        embed_s = time.perf_counter() - began
    return source, {
        "files": source.files,
        "chunks": source.chunks,
        "index_s": round(seconds, 2),
        "files_per_s": round(source.files / seconds, 1),
        "chunks_per_s": round(source.chunks / seconds, 1),
        "embedded": embedded,
        "embed_s": round(embed_s, 2),
        "embedded_per_s": round(embedded / embed_s, 1) if embed_s else None,
    }


# ---------------------------------------------------------------------------------- finding


_PASSAGE_RE = re.compile(r"^\[\d+\] \(knowledge, [^,]+, source: (\S+?)[,)]")


def rendered_passages(tail: str) -> dict[str, str]:
    """The passages of knowledge in a turn's references as rendered: locator → its text
    (the numbered header line and its quoted lines)."""
    found: dict[str, str] = {}
    lines = tail.splitlines()
    for n, line in enumerate(lines):
        match = _PASSAGE_RE.match(line)
        if match is None:
            continue
        end = n + 1
        while end < len(lines) and lines[end].startswith(">"):
            end += 1
        found[match.group(1)] = "\n".join(lines[n:end])
    return found


def measure_finding(
    wiring: Wiring, source: Source, questions: Sequence[Question], agent_id: str
) -> dict[str, Any]:
    """Each question through the search and through a previewed turn."""
    agent = wiring.team.get(agent_id)
    scopes = turn_scopes(GROUP, agent.id)
    candidates = wiring.tuning.recall(agent).candidates
    counter = TokenCounter()
    chunk_tokens = {c.id: c.tokens for c in wiring.knowledge.chunks(source.name, limit=10**9)}
    rows: list[dict[str, Any]] = []
    for q in questions:
        ranked = ranked_candidates(  # as recall ranks them, from as many candidates
            wiring.knowledge, q.question, scopes, candidates, wiring.knowledge_vectors
        )
        hits = [candidate.hit for candidate in ranked[:SEARCH_LIMIT]]
        rank = next(
            (n for n, hit in enumerate(hits, 1) if _hits_passage(hit.locator, q, source.name)),
            None,
        )
        built = preview(wiring, agent, next_trigger(wiring.history, GROUP, q.question)).built
        given = [c for c in built.report.citations if c.trust.startswith("knowledge")]
        given_refs = [c.ref or "" for c in given]
        rendered = rendered_passages(built.request.system_tail)
        given_at = next(
            (n for n, ref in enumerate(given_refs, 1) if _hits_passage(ref, q, source.name)),
            None,
        )
        rows.append(
            {
                "id": q.qid,
                "expected": f"{source.name}/{q.file}#L{q.first}-{q.last}",
                "rank": rank,
                "top": [hit.locator for hit in hits[:3]],
                "given": given_refs,
                "given_at": given_at,
                "chunk_tokens": sum(chunk_tokens[int(str(c.id).split()[-1])] for c in given),
                "rendered_tokens": sum(
                    counter.count(rendered[ref]) for ref in given_refs if ref in rendered
                ),
            }
        )
    count = len(rows) or 1
    rendered_tokens = sorted(r["rendered_tokens"] for r in rows)
    chunk_sums = sorted(r["chunk_tokens"] for r in rows)
    return {
        "questions": len(rows),
        "by_meaning": wiring.knowledge_vectors is not None,
        "recall_at_1": round(sum(1 for r in rows if r["rank"] == 1) / count, 3),
        "recall_at_5": round(sum(1 for r in rows if r["rank"] and r["rank"] <= 5) / count, 3),
        "recall_at_10": round(sum(1 for r in rows if r["rank"]) / count, 3),
        "context_recall": round(sum(1 for r in rows if r["given_at"]) / count, 3),
        "passages_given_mean": round(statistics.fmean(len(r["given"]) for r in rows), 2),
        "tokens_mean": round(statistics.fmean(rendered_tokens), 1),
        "tokens_p95": _pct(rendered_tokens, 0.95),
        "tokens_max": rendered_tokens[-1],
        "chunk_tokens_mean": round(statistics.fmean(chunk_sums), 1),
        "chunk_tokens_p95": _pct(chunk_sums, 0.95),
        "matched_share": matched_share(wiring.knowledge, questions, scopes),
        "rows": rows,
    }


# ---------------------------------------------------------------------------------- synthetic

_SYLLABLES = """
    ka lo mi ra tu ve shi no pe zan dor el fi qua rin tos bel mar cy xo gu ha
"""
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s+(.*)")
_WORD_RE = re.compile(r"\S+")


@dataclass(slots=True)
class _Model:
    """One document of the documentation, as the generator draws on it: a word-bigram model
    of its prose, its headings, its code blocks and the lengths of its sections."""

    follows: dict[str, list[str]]
    starts: list[str]
    headings: list[str]
    code: list[str]
    lengths: list[int]


def _model(text: str) -> _Model | None:
    follows: defaultdict[str, list[str]] = defaultdict(list)
    prose: list[str] = []
    headings: list[str] = []
    code: list[str] = []
    lengths: list[int] = [0]
    block: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            if fenced and 2 <= len(block) <= 25:
                code.append("\n".join(block))
            fenced, block = not fenced, []
        elif fenced:
            block.append(line)
        elif heading := _HEADING.match(line):
            headings.append(heading.group(1).strip())
            lengths.append(0)
            continue
        else:
            prose.extend(_WORD_RE.findall(line))
        lengths[-1] += len(line) + 1
    starts = [prose[0]] if prose else []
    for a, b in itertools.pairwise(prose):
        follows[a].append(b)
        if a.endswith("."):
            starts.append(b)
    if not follows or not headings:
        return None
    kept = [min(n, 1400) for n in lengths if n >= 40]
    return _Model(dict(follows), starts, headings, code, kept or [600])


class Synthetic:
    """Markdown in the documentation's manner: each file written after one of its documents
    (chosen by size), so that a file keeps to a topic as documentation does; its sections as
    long as that document's, headed by its headings, in prose from a word-bigram model of its
    prose (a generated project name now and then), with its code blocks now and then."""

    def __init__(self, docs: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.models: list[_Model] = []
        sizes: list[int] = []
        for path in sorted(docs.rglob("*.md")):
            text = path.read_text(encoding="utf-8")
            if (model := _model(text)) is not None:
                self.models.append(model)
                sizes.append(len(text))
        if not self.models:
            raise ValueError(f"no Markdown with headings and prose in {docs}")
        self.weights = list(itertools.accumulate(sizes))
        syllables = _SYLLABLES.split()
        names = {
            "".join(self.rng.choice(syllables) for _ in range(self.rng.randint(2, 3)))
            for _ in range(6000)
        }
        self.names = sorted(names)
        self.rng.shuffle(self.names)
        self.model = self.models[0]

    def name(self) -> str:
        # Zipf-like: a few names are common, most are rare.
        return self.names[min(len(self.names) - 1, int(self.rng.paretovariate(1.0)) - 1)]

    def sentence(self) -> str:
        rng, follows = self.rng, self.model.follows
        word = rng.choice(self.model.starts)
        words = [word]
        for _ in range(rng.randint(8, 30)):
            nexts = follows.get(word)
            if not nexts:
                break
            word = rng.choice(nexts)
            words.append(self.name() if rng.random() < 1 / 30 else word)
            if word.endswith("."):
                break
        text = " ".join(words)
        return text if text.endswith(".") else text + "."

    def paragraph(self) -> str:
        return "\n".join(self.sentence() for _ in range(self.rng.randint(1, 4)))

    def section(self, level: int) -> str:
        rng, model = self.rng, self.model
        parts = ["#" * level + f" {rng.choice(model.headings)} {self.name()}"]
        size, target = 0, rng.choice(model.lengths)
        while size < target:
            if model.code and rng.random() < 0.15:
                part = f"```python\n{rng.choice(model.code)}\n```"
            else:
                part = self.paragraph()
            if size and size + len(part) > 1450:
                break
            parts.append(part)
            size += len(part)
        return "\n\n".join(parts)

    def document(self, sections: int) -> str:
        self.model = self.rng.choices(self.models, cum_weights=self.weights)[0]
        title = f"# {self.name().title()} {self.rng.choice(self.model.headings)}"
        body = [self.section(2 if n == 0 else self.rng.choice((2, 2, 3))) for n in range(sections)]
        return title + "\n\n" + "\n\n".join(body) + "\n"


def write_synthetic(root: Path, text: Synthetic, chunks: int) -> int:
    """Files of about ``chunks`` sections in all (a section is a chunk), 100 to a folder;
    how many files."""
    written, files = 0, 0
    while written < chunks:
        sections = min(text.rng.randint(8, 30), chunks - written)
        folder = root / f"area-{files // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{text.name()}-{files:05d}.md"
        path.write_text(text.document(sections), encoding="utf-8")
        written += sections
        files += 1
    return files


def measure_scale(
    args: argparse.Namespace, folder: Path, size: int, questions: Sequence[Question]
) -> dict[str, Any]:
    """A synthetic source of ``size`` chunks: indexing, searching, re-indexing."""
    label = _label(size)
    settings = _settings(folder, embeddings="off")  # the full-text search at scale
    engine = make_engine(settings.effective_database_url)
    try:
        wiring = Wiring(settings, engine)
        text = Synthetic(args.docs, args.seed + size)
        root = folder / "source"
        began = time.perf_counter()
        files = write_synthetic(root, text, size)
        written_s = time.perf_counter() - began
        print(f"{label}: {files:,} files written in {written_s:.1f} s; indexing", flush=True)
        source, indexing = _index(wiring, f"synthetic-{label}", root, label)
        agent = wiring.team.get(args.agent)
        config = wiring.tuning.recall(agent)
        scopes = turn_scopes(GROUP, agent.id)
        store = wiring.knowledge
        asked = [questions[n % len(questions)].question for n in range(args.searches)]
        for question in asked[:10]:  # the first touches of the index, outside the clock
            store.search(query_terms(question), scopes, config.candidates)
        print(f"{label}: {len(asked)} searches", flush=True)
        search_s: list[float] = []
        passages_s: list[float] = []
        for question in asked:
            terms = query_terms(question)
            began = time.perf_counter()
            store.search(terms, scopes, config.candidates)
            search_s.append(time.perf_counter() - began)
            began = time.perf_counter()
            find_passages(store, question, group=GROUP, agent=agent.id, config=config, dropped=[])
            passages_s.append(time.perf_counter() - began)
        matched = matched_share(store, questions, scopes)
        reindex = measure_reindex(wiring, source, root, text)
    finally:
        engine.dispose()
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "size": size,
        "write_s": round(written_s, 1),
        **indexing,
        "search_limit": config.candidates,
        "matched_share": matched,
        "search": _summary_ms(search_s),
        "passages": _summary_ms(passages_s),
        "reindex": reindex,
    }


def measure_reindex(wiring: Wiring, source: Source, root: Path, text: Synthetic) -> dict[str, Any]:
    """Sync the whole source after one file changed, a few times, and once unchanged."""
    paths = sorted(root.rglob("*.md"))
    changed_s: list[float] = []
    reports = []
    for path in text.rng.sample(paths, min(REINDEX_ROUNDS, len(paths))):
        with path.open("a", encoding="utf-8") as out:
            out.write("\n" + text.paragraph() + "\n")
        info = path.stat()
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 2_000_000_000))
        current = wiring.knowledge.get(source.name)
        assert current is not None
        began = time.perf_counter()
        report = wiring.indexer.sync(current, now=datetime.now(UTC))
        changed_s.append(time.perf_counter() - began)
        reports.append(
            {
                "changed": report.changed,
                "unchanged": report.unchanged,
                "written": report.chunks_written,
            }
        )
    current = wiring.knowledge.get(source.name)
    assert current is not None
    began = time.perf_counter()
    wiring.indexer.sync(current, now=datetime.now(UTC))
    unchanged_s = time.perf_counter() - began
    return {
        "changed_s": [round(s, 3) for s in changed_s],
        "changed_max_s": round(max(changed_s), 3),
        "unchanged_s": round(unchanged_s, 3),
        "reports": reports,
    }


# ---------------------------------------------------------------------------------- report


def _label(size: int) -> str:
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}m"
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    finding = results["finding"]
    rows = [
        {
            "target": "search recall@5",
            "limit": f">= {RECALL_TARGET}",
            "measured": finding["recall_at_5"],
            "verdict": _verdict(finding["recall_at_5"] >= RECALL_TARGET),
        },
        {
            "target": "recall among the passages given (at most 5)",
            "limit": f">= {RECALL_TARGET}",
            "measured": finding["context_recall"],
            "verdict": _verdict(finding["context_recall"] >= RECALL_TARGET),
        },
        {
            "target": "knowledge tokens per call p95",
            "limit": f"<= {TOKENS_TARGET:,}",
            "measured": finding["tokens_p95"],
            "verdict": _verdict(finding["tokens_p95"] <= TOKENS_TARGET),
        },
    ]
    for row in results["scale"]:
        if row["size"] == REINDEX_SIZE:
            worst = row["reindex"]["changed_max_s"]
            rows.append(
                {
                    "target": f"re-index one changed file, {row['chunks']:,} chunks (s)",
                    "limit": f"< {REINDEX_TARGET_S}",
                    "measured": worst,
                    "verdict": _verdict(worst < REINDEX_TARGET_S),
                }
            )
    return rows


def print_misses(finding: dict[str, Any]) -> None:
    missed = [r for r in finding["rows"] if not (r["rank"] and r["rank"] <= 5) or not r["given_at"]]
    if not missed:
        return
    print(f"missed (not in the top 5, or not given): {len(missed)}")
    for r in missed:
        where = f"rank {r['rank']}" if r["rank"] else "not in the top 10"
        given = f"given #{r['given_at']}" if r["given_at"] else "not given"
        print(f"  {r['id']} {r['expected']} ({where}, {given}); top 3: {', '.join(r['top'])}")


def print_report(results: dict[str, Any], machine: str) -> None:
    docs, f = results["docs"], results["finding"]
    print()
    print(f"knowledge sources ({machine}; SQLite WAL in a temporary folder)")
    print(
        f"indexing {docs['name']}: {docs['files']} files, {docs['chunks']} chunks in "
        f"{docs['index_s']:.2f} s ({docs['files_per_s']:,.0f} files/s, "
        f"{docs['chunks_per_s']:,.0f} chunks/s)"
    )
    print(
        f"{'questions':>9} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'context':>8} {'given':>6} "
        f"{'tok mean':>9} {'tok p95':>8} {'tok max':>8} {'chunk tok p95':>14}"
    )
    print(
        f"{f['questions']:>9} {f['recall_at_1']:>6.3f} {f['recall_at_5']:>6.3f} "
        f"{f['recall_at_10']:>6.3f} {f['context_recall']:>8.3f} "
        f"{f['passages_given_mean']:>6.2f} {f['tokens_mean']:>9.0f} {f['tokens_p95']:>8} "
        f"{f['tokens_max']:>8} {f['chunk_tokens_p95']:>14}"
    )
    print(f"a question's words match {f['matched_share']:.0%} of the chunks (mean)")
    if f["by_meaning"]:
        print(
            f"by meaning: on; {docs['embedded']:,} chunks embedded in {docs['embed_s']:.1f} s "
            f"({docs['embedded_per_s'] or 0:,.1f} chunks/s, after their words)"
        )
    else:
        print("by meaning: off (the model's weights are not installed; full text only)")
    print_misses(f)
    if results["scale"]:
        print(
            f"{'chunks':>9} {'files':>6} {'index s':>8} {'files/s':>8} {'chunks/s':>9} "
            f"{'search p50':>11} {'search p95':>11} {'passages p95':>13} "
            f"{'matched':>8} {'re-index s':>11} {'unchanged s':>12}"
        )
    for row in results["scale"]:
        s, p, r = row["search"], row["passages"], row["reindex"]
        print(
            f"{row['chunks']:>9,} {row['files']:>6,} {row['index_s']:>8.1f} "
            f"{row['files_per_s']:>8,.0f} {row['chunks_per_s']:>9,.0f} "
            f"{s['p50_ms']:>11.2f} {s['p95_ms']:>11.2f} {p['p95_ms']:>13.2f} "
            f"{row['matched_share']:>8.0%} {r['changed_max_s']:>11.3f} {r['unchanged_s']:>12.3f}"
        )
    print(f"{'target':<46} {'limit':>9} {'measured':>9}  verdict")
    for v in results["targets"]:
        print(f"{v['target']:<46} {v['limit']:>9} {v['measured']:>9}  {v['verdict']}")
    load = " ".join(f"{v:.2f}" for v in results["load_average"])
    print(f"total run time {results['elapsed_s']:.0f} s, load average {load}")


def last_line(results: dict[str, Any]) -> str:
    f = results["finding"]
    pairs: list[tuple[str, object]] = [
        ("recall_at_5", f"{f['recall_at_5']:.3f}"),
        ("recall_at_10", f"{f['recall_at_10']:.3f}"),
        ("context_recall", f"{f['context_recall']:.3f}"),
        ("knowledge_tokens_p95", f["tokens_p95"]),
    ]
    for row in results["scale"]:
        label = _label(row["size"])
        pairs.append((f"search_p95_ms_{label}", f"{row['search']['p95_ms']:.2f}"))
        pairs.append((f"reindex_s_{label}", f"{row['reindex']['changed_max_s']:.3f}"))
    return " ".join(f"{k}={v}" for k, v in pairs)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=DATA / "starlette")
    parser.add_argument("--questions", type=Path, default=DATA / "starlette.questions.jsonl")
    parser.add_argument(
        "--scale",
        type=lambda s: sorted(int(x) for x in s.split(",") if x),
        default=[10_000, 100_000],
        help="synthetic source sizes in chunks, comma-separated ('' for none)",
    )
    parser.add_argument("--searches", type=int, default=200, help="timed searches per size")
    parser.add_argument("--agent", default="architect", help="whose turn is previewed")
    parser.add_argument("--seed", type=int, default=20260127)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not args.docs.is_dir():
        parser.error(f"--docs: no folder {args.docs}")
    if not args.questions.is_file():
        parser.error(f"--questions: no file {args.questions}")
    if args.searches < 1 or any(size < 1 for size in args.scale):
        parser.error("--searches and the --scale sizes must be at least 1")
    try:
        args.loaded = load_questions(args.questions)
    except (ValueError, OSError) as exc:
        parser.error(f"--questions: {exc}")
    absent = [q.qid for q in args.loaded if not (args.docs / q.file).is_file()]
    if absent:
        parser.error(f"--questions: {len(absent)} name a file not in --docs (first: {absent[0]})")
    return args


def main() -> int:
    args = parse_args()
    machine = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    questions: list[Question] = args.loaded
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="arena-knowledge-") as tmp:
        folder = Path(tmp) / "docs"
        settings = _settings(folder)
        engine = make_engine(settings.effective_database_url)
        try:
            wiring = Wiring(settings, engine)
            name = re.sub(r"[^a-z0-9_-]", "-", args.docs.resolve().name.lower())[:64] or "docs"
            print(f"indexing {args.docs}", flush=True)
            source, indexing = _index(wiring, name, args.docs.resolve(), name)
            print(f"{len(questions)} questions: search and context", flush=True)
            finding = measure_finding(wiring, source, questions, args.agent)
        finally:
            engine.dispose()
        scale = [
            measure_scale(args, Path(tmp) / f"scale-{size}", size, questions) for size in args.scale
        ]
    results: dict[str, Any] = {
        "machine": machine,
        "docs": {"name": name, "path": str(args.docs), **indexing},
        "finding": finding,
        "scale": scale,
    }
    results["elapsed_s"] = round(time.perf_counter() - began, 1)
    results["load_average"] = [round(v, 2) for v in os.getloadavg()]
    results["targets"] = verdicts(results)
    print_report(results, machine)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(last_line(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
