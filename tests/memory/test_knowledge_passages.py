"""The passages a turn is given within their token limit: counted as the agent reads them
(header and quoted lines), and a chunk larger than the room left given in part (the lines that
hold the question's words, with a locator of their own that resolves as current) instead of
being left out."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from orchestrator.core.chunking import parse_locator
from orchestrator.memory.knowledge.indexer import Indexer
from orchestrator.memory.knowledge.locate import resolve
from orchestrator.memory.knowledge.store import KnowledgeStore
from orchestrator.memory.recall.passages import find_passages, fitted, shown_tokens
from orchestrator.memory.recall.values import Dropped, RecallConfig

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
FILLER = "The service keeps running while the operators look at the dashboards and logs."


def _store(engine: Engine, tmp_path: Path) -> KnowledgeStore:
    docs = tmp_path / "docs"
    docs.mkdir()
    lines = ["# Runbook", ""]
    lines += [f"{FILLER} Step {n}." for n in range(1, 8)]
    lines += ["To rotate the signing keys, run the keyring command with the rotate flag."]
    lines += [f"{FILLER} Later step {n}." for n in range(1, 8)]
    (docs / "runbook.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = KnowledgeStore(engine)
    source = store.add(
        name="docs", kind="folder", root=docs, scope="group", scope_id="demo",
        trust="trusted", now=T0,
    )  # fmt: skip
    Indexer(store).sync(source, now=T0)
    return store


def test_a_chunk_too_large_for_the_room_left_is_given_in_part(engine: Engine, tmp_path: Path):
    store = _store(engine, tmp_path)
    (whole,) = store.chunks("docs")
    dropped: list[Dropped] = []
    config = RecallConfig(knowledge_tokens=120)
    (given,) = find_passages(
        store, "how do I rotate the signing keys?", group="demo", agent="dev", config=config,
        dropped=dropped,
    )  # fmt: skip
    assert "rotate the signing keys" in given.text
    assert len(given.text) < len(whole.text)
    assert given.tokens < config.knowledge_tokens
    located = parse_locator(given.locator)
    assert whole.start <= located.start <= located.end <= whole.end
    assert (located.start, located.end) != (whole.start, whole.end)
    now = resolve(store, given.locator)
    assert now.state == "current"
    assert now.text == given.text
    assert not dropped


def test_the_limit_counts_the_passage_as_shown(engine: Engine, tmp_path: Path):
    store = _store(engine, tmp_path)
    hits = store.search(["rotate"], [("group", "demo")], 5)
    (hit,) = hits
    assert shown_tokens(hit) > hit.tokens + hit.text.count("\n")  # its header and quotes
    config = RecallConfig(knowledge_tokens=shown_tokens(hit))
    (given,) = find_passages(store, "rotate", group="demo", agent="dev", config=config, dropped=[])
    assert given.locator == hit.locator  # exactly room for the whole chunk


def test_no_part_when_not_even_a_line_fits_or_the_room_is_small(engine: Engine, tmp_path: Path):
    store = _store(engine, tmp_path)
    (hit,) = store.search(["rotate"], [("group", "demo")], 5)
    assert fitted(hit, 1, ["rotat"]) is None
    dropped: list[Dropped] = []
    config = RecallConfig(knowledge_tokens=40)
    assert not find_passages(
        store, "rotate", group="demo", agent="dev", config=config, dropped=dropped
    )
    assert [d.layer for d in dropped] == ["char_budget"]
    assert "for knowledge" in dropped[0].reason


def test_without_the_question_s_words_the_part_is_the_chunk_s_start(engine: Engine, tmp_path: Path):
    store = _store(engine, tmp_path)
    (hit,) = store.search(["rotate"], [("group", "demo")], 5)
    part = fitted(hit, 60, ["nothing", "matches"])
    assert part is not None
    assert part.start == hit.start
    assert hit.text.startswith(part.text)
