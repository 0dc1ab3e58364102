"""Knowledge by meaning: with an embedder, each window of a chunk gets a vector (after its words
are indexed, newest chunks first, never for a chunk replaced meanwhile), a question finds the
chunk closest in meaning even when it shares no word with it, the search's order and the order
by meaning are fused, and the vectors go with their chunks. The embedder here is a stand-in
whose words of one meaning share a direction (the real model has its own tests)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.memory.knowledge.embedding import Embedded, embed_pending, embedded_counts
from orchestrator.memory.knowledge.indexer import Indexer
from orchestrator.memory.knowledge.store import KnowledgeStore, Source, turn_scopes
from orchestrator.memory.knowledge.vectors import WINDOW_CHARS, ChunkVectors, chunk_windows
from orchestrator.memory.recall.passages import MEANING_VETO, find_passages, ranked_candidates
from orchestrator.memory.recall.values import RecallConfig
from orchestrator.memory.session.fts import query_terms
from tests.databases import on_each_database

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
MEANINGS = {
    "dotfile": 0,
    "env": 0,
    "environment": 0,
    "variables": 0,
    "settings": 0,
    "charset": 1,
    "encoding": 1,
    "utf": 1,
    "greeting": 2,
    "mail": 2,
    "email": 2,
    "background": 2,
    "task": 2,
}


class Meanings:
    """Each known word adds to its meaning's axis; other words to a shared noise axis."""

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        vectors = []
        for value in texts:
            vector = [0.0] * 4
            for word in value.lower().replace(".", " ").split():
                vector[MEANINGS.get(word.strip("?,!:`'\""), 3)] += 1.0
            vector[3] *= 0.05
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            vectors.append([x / norm for x in vector])
        return vectors


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "config.md").write_text(
        "# Config\n\n## Environment\n\nValues come from the environment variables first, "
        "then from the .env file.\n\n## Encoding\n\nThe file is read as UTF-8 unless another "
        "encoding is given.\n",
        encoding="utf-8",
    )
    (folder / "tasks.md").write_text(
        "# Tasks\n\nA background task runs after the response, such as sending an email.\n",
        encoding="utf-8",
    )
    return folder


def _source(store: KnowledgeStore, root: Path) -> Source:
    return store.add(
        name="docs", kind="folder", root=root, scope="group", scope_id="demo",
        trust="trusted", now=T0,
    )  # fmt: skip


def _indexed(engine: Engine, docs: Path) -> tuple[KnowledgeStore, ChunkVectors, Indexer]:
    store = KnowledgeStore(engine)
    vectors = ChunkVectors(engine, loader=Meanings)
    indexer = Indexer(store)
    indexer.sync(_source(store, docs), now=T0)
    _embed_all(engine, vectors)
    return store, vectors, indexer


def _embed_all(engine: Engine, vectors: ChunkVectors) -> int:
    total = 0
    while done := embed_pending(engine, vectors, limit=2):
        total += done
    return total


@on_each_database
def test_a_question_without_a_shared_word_finds_the_chunk_by_meaning(engine: Engine, docs: Path):
    store, vectors, _ = _indexed(engine, docs)
    question = "what charset does it assume?"
    assert not store.search(["charset", "assume"], turn_scopes("demo", "dev"), 10)
    ranked = ranked_candidates(store, question, turn_scopes("demo", "dev"), 10, vectors)
    assert ranked[0].hit.heading == "Config > Encoding"
    assert ranked[0].cosine > 0.9
    given = find_passages(
        store, question, group="demo", agent="dev", config=RecallConfig(), dropped=[],
        vectors=vectors,
    )  # fmt: skip
    assert given[0].heading == "Config > Encoding"
    assert given[0].why.startswith("close in meaning; meaning ")
    assert not ranked_candidates(store, question, turn_scopes("other", "dev"), 10, vectors)


def test_both_orders_are_fused_and_words_still_count(engine: Engine, docs: Path):
    store, vectors, _ = _indexed(engine, docs)
    ranked = ranked_candidates(
        store, "how do I send a greeting mail in the background", turn_scopes("demo", "dev"),
        10, vectors,
    )  # fmt: skip
    best = ranked[0]
    assert best.hit.path == "docs/tasks.md"
    assert "background" in best.found
    assert best.cosine > 0.5


@on_each_database
def test_vectors_follow_their_chunks_and_are_made_for_new_chunks_only(engine: Engine, docs: Path):
    store, vectors, indexer = _indexed(engine, docs)

    def count() -> int:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM knowledge_vectors")).scalar_one())

    chunks = len(store.chunks("docs"))
    assert count() >= chunks
    assert embedded_counts(engine)["docs"].pending == 0
    assert embed_pending(engine, vectors) == 0  # nothing waits: nothing embedded again
    (docs / "tasks.md").unlink()
    indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert count() == len(store.chunks("docs")) == chunks - 1
    (docs / "tasks.md").write_text("# Tasks\n\nAn email greeting is sent in the background.\n")
    indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert embedded_counts(engine)["docs"] == Embedded(done=chunks - 1, chunks=chunks)
    loader = Meanings()
    fresh = ChunkVectors(engine, loader=lambda: loader)
    assert _embed_all(engine, fresh) == 1
    assert embedded_counts(engine)["docs"].pending == 0
    store.remove("docs")
    assert count() == 0
    assert embedded_counts(engine) == {}


@on_each_database
def test_the_newest_chunks_are_embedded_first_and_a_replaced_one_gets_no_vectors(
    engine: Engine, docs: Path
):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    indexer.sync(_source(store, docs), now=T0)
    newest = max(c.id for c in store.chunks("docs"))

    class ReplacedMeanwhile(Meanings):
        """The file is edited while its chunks are being embedded."""

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            if self.calls == 0:
                (docs / "tasks.md").write_text("# Tasks\n\nNothing runs in the background.\n")
                indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
            return super().embed(texts)

    vectors = ChunkVectors(engine, loader=ReplacedMeanwhile)
    assert embed_pending(engine, vectors, limit=1) == 0  # its chunk was replaced meanwhile
    ids = [c.id for c in store.chunks("docs")]
    assert newest not in ids  # a replaced chunk's id is never given again
    assert embed_pending(engine, vectors, limit=1) == 1
    with engine.connect() as conn:
        embedded = conn.execute(text("SELECT chunk_id FROM knowledge_vectors")).scalars().all()
    assert set(embedded) == {max(ids)}


def test_a_long_chunk_gets_one_window_per_part_the_model_sees_whole():
    lines = [f"line {n} " + "x" * 60 for n in range(40)]
    windows = chunk_windows("Guide > Long", "\n".join(lines))
    assert len(windows) > 1
    assert all(w.startswith("Guide > Long\n") for w in windows)
    assert all(len(w) <= WINDOW_CHARS + len("Guide > Long\n") + 70 for w in windows)
    assert "\n".join(w.split("\n", 1)[1] for w in windows) == "\n".join(lines)


def test_without_an_embedder_nothing_is_embedded_and_recall_is_full_text(
    engine: Engine, docs: Path
):
    store = KnowledgeStore(engine)
    vectors = ChunkVectors(engine, loader=lambda: None)
    Indexer(store).sync(_source(store, docs), now=T0)
    assert embed_pending(engine, vectors) == 0
    assert embedded_counts(engine)["docs"].done == 0
    assert vectors.closest("charset", turn_scopes("demo", "dev"), 10) == []
    ranked = ranked_candidates(store, "encoding", turn_scopes("demo", "dev"), 10, vectors)
    assert [c.hit.heading for c in ranked] == ["Config > Encoding"]


def test_a_turn_is_compared_with_each_scope_it_sees_and_no_other(
    engine: Engine, docs: Path, tmp_path: Path
):
    store, vectors, indexer = _indexed(engine, docs)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "mail.md").write_text("# Mail\n\nOutgoing email goes through the relay.\n")
    everyone = store.add(
        name="shared", kind="folder", root=shared, scope="everyone", scope_id="",
        trust="external", now=T0,
    )  # fmt: skip
    indexer.sync(everyone, now=T0)
    _embed_all(engine, vectors)
    demo = vectors.closest("email greeting", turn_scopes("demo", "dev"), 10)
    other = vectors.closest("email greeting", turn_scopes("other", "dev"), 10)
    paths = {h.path for h in store.by_ids([i for i, _ in demo]).values()}
    assert paths == {"docs/tasks.md", "shared/mail.md", "docs/config.md"}
    assert {h.path for h in store.by_ids([i for i, _ in other]).values()} == {"shared/mail.md"}
    assert demo == sorted(demo, key=lambda pair: -pair[1])


def test_a_chunk_its_words_found_but_far_in_meaning_is_left_out(engine: Engine, docs: Path):
    store, vectors, _ = _indexed(engine, docs)
    question = "which file sends the greeting email?"
    scopes = turn_scopes("demo", "dev")
    by_words = {h.path for h in store.search(query_terms(question), scopes, 10)}
    assert by_words == {"docs/config.md", "docs/tasks.md"}  # "file" is in the config's text
    ranked = ranked_candidates(store, question, scopes, 10, vectors)
    assert [c.hit.path for c in ranked] == ["docs/tasks.md"]  # the config means another thing
    assert ranked[0].cosine > MEANING_VETO
    close, known = vectors.compared(question, scopes, 10, [h.id for h in store.chunks("docs")])
    assert {chunk_id for chunk_id, _ in close} <= set(known)
    assert all(known[c.id] < MEANING_VETO for c in store.chunks("docs") if "UTF-8" in c.text)
    without = ranked_candidates(store, question, scopes, 10, ChunkVectors(engine, lambda: None))
    assert {c.hit.path for c in without} == by_words  # no vectors: nothing is left out
