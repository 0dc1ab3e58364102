"""Recall: each layer drops what it should and says so; ranking, CJK, isolation, last use."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.errors import ValidationError
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.recall.recaller import RecallConfig, Recaller
from orchestrator.memory.session import fts
from orchestrator.memory.session.store import NewMemory, SessionMemory
from tests.history_seed import write_history

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OPEN = RecallConfig(relevance_floor=0.0, max_entries=50, char_budget=100_000)


@pytest.fixture
def memory(engine):
    """A session memory store on a SQLite file."""
    return SessionMemory(engine)


@pytest.fixture
def recaller(memory):
    """Recall over the store, full text only."""
    return Recaller(memory)


def put(memory: SessionMemory, content: str, *, age_days: float = 0, **fields) -> int:
    values: dict[str, Any] = {
        "scope": "session",
        "scope_id": "alpha",
        "type": "fact",
        "content": content,
        "now": NOW - timedelta(days=age_days),
        "confidence": 0.8,
        "agent": "ping",
        "group_id": "alpha",
        "source_message_id": f"msg-{uuid.uuid4().hex[:8]}",
    }
    values.update(fields)
    return memory.write(NewMemory(**values)).record.id


def recall(recaller: Recaller, query: str, config: RecallConfig = OPEN, group: str = "alpha"):
    return recaller.recall(query, group=group, agent="ping", config=config, now=NOW)


def dropped_by(result, layer: str) -> set[int]:
    return {d.id for d in result.dropped if d.layer == layer}


def test_relevance_floor_drops_weak_matches_with_a_reason(memory, recaller):
    """An entry sharing one word of four falls under the floor; the full match passes."""
    strong = put(memory, "The payment service retries failed webhooks")
    weak = put(memory, "Our service desk opens at nine in the morning")
    result = recall(recaller, "payment service webhooks retries", RecallConfig())
    assert [s.id for s in result.snippets] == [strong]
    assert dropped_by(result, "relevance_floor") == {weak}
    reason = next(d.reason for d in result.dropped if d.id == weak)
    assert "below 0.40" in reason
    assert result.snippets[0].similarity == 1.0


def test_untrusted_keys_and_job_entries_are_dropped(memory, recaller):
    """Model-made keys, unverified external keys and job-written entries never come back."""
    untrusted = {
        put(memory, f"release notes draft {n}", key=key)
        for n, key in enumerate(
            [
                "assistant_resp_1",
                "ai_summary_week",
                "generated_plan",
                "draft_notes",
                "untrusted_claim",
                "external_blog",
            ]
        )
    }
    untrusted.add(put(memory, "release notes summary from the nightly job", written_by="job"))
    kept = {
        put(memory, "release notes are on the wiki", key="external_verified_wiki"),
        put(memory, "release notes need a reviewer", key="release_review"),
    }
    result = recall(recaller, "release notes")
    assert {s.id for s in result.snippets} == kept
    assert dropped_by(result, "untrusted") == untrusted
    assert any("scheduled job" in d.reason for d in result.dropped)
    everything = recall(
        recaller, "release notes", RecallConfig(**{**_open(), "exclude_untrusted": False})
    )
    assert {s.id for s in everything.snippets} == kept | untrusted


def _open() -> dict[str, Any]:
    return {"relevance_floor": 0.0, "max_entries": 50, "char_budget": 100_000}


def test_require_source_drops_entries_without_a_source_message(memory, recaller):
    """With require_source, an entry without a source message is dropped and recorded."""
    sourced = put(memory, "Backups run at 2am")
    unsourced = put(memory, "Backups are kept for 30 days", source_message_id=None)
    config = RecallConfig(**_open(), require_source=True)
    result = recall(recaller, "backups", config)
    assert [s.id for s in result.snippets] == [sourced]
    assert dropped_by(result, "require_source") == {unsourced}
    assert {s.id for s in recall(recaller, "backups").snippets} == {sourced, unsourced}


def test_max_entries_keeps_the_best_ranked(memory, recaller):
    """Past max_entries the lower-ranked candidates are dropped with their rank."""
    ids = [put(memory, f"Incident {n} was caused by the cache") for n in range(4)]
    result = recall(recaller, "incident cache", RecallConfig(**{**_open(), "max_entries": 2}))
    assert len(result.snippets) == 2
    assert dropped_by(result, "max_entries") == set(ids) - {s.id for s in result.snippets}
    assert all("past the limit of 2" in d.reason for d in result.dropped)


def test_char_budget_skips_what_does_not_fit(memory, recaller):
    """Snippets fill the character budget in rank order; what does not fit is dropped."""
    short = put(memory, "Lunch order: pizza", verified=True)
    long = put(memory, "Lunch order: " + "sandwiches with many fillings " * 5)
    result = recall(recaller, "lunch order", RecallConfig(**{**_open(), "char_budget": 60}))
    assert [s.id for s in result.snippets] == [short]
    assert dropped_by(result, "char_budget") == {long}
    assert "do not fit" in result.dropped[0].reason


def test_ranking_formula_with_source_verified_and_recency_boosts(memory, recaller):
    """final = sim*0.5 + conf'*0.3 + scope*0.2; conf' = conf*1.2 (source)*1.3 (verified)*recency."""
    session_id = put(
        memory, "The office wifi is called arena", confidence=0.5, verified=True, age_days=10
    )
    personal_id = put(
        memory,
        "The office wifi password is on the fridge",
        scope="personal",
        scope_id="ping",
        source_message_id=None,
        confidence=0.9,
        age_days=100,
    )
    result = recall(recaller, "office wifi")
    by_id = {s.id: s for s in result.snippets}
    session, personal = by_id[session_id], by_id[personal_id]
    assert math.isclose(session.confidence, 0.5 * 1.2 * 1.3 * 0.9, abs_tol=1e-4)
    assert math.isclose(personal.confidence, 0.9 * 0.7, abs_tol=1e-4)
    for snippet, priority in ((session, 1.0), (personal, 0.6)):
        expected = snippet.similarity * 0.5 + snippet.confidence * 0.3 + priority * 0.2
        assert math.isclose(snippet.score, expected, abs_tol=1e-3)
    assert (session.trust, personal.trust) == ("verified", "unsourced")
    assert [s.id for s in result.snippets] == [session_id, personal_id]


def test_verified_entry_outranks_an_equally_relevant_one(memory, recaller):
    """With equal similarity, the verified boost decides the order; confidence is capped at 1."""
    plain = put(memory, "Deploy window is Monday", confidence=0.9)
    verified = put(memory, "Deploy window is Friday", confidence=0.9, verified=True)
    snippets = recall(recaller, "deploy window").snippets
    assert [s.id for s in snippets] == [verified, plain]
    assert snippets[0].similarity == snippets[1].similarity
    assert snippets[0].confidence == 1.0


def test_global_memory_is_recalled_with_its_priority(memory, recaller):
    """Global entries are searched too, ranked with scope priority 0.8."""
    entry = put(memory, "Answer in British English", scope="global", scope_id="", group_id=None)
    snippet = recall(recaller, "which English spelling").snippets[0]
    assert snippet.id == entry
    assert snippet.scope == "global"
    expected = snippet.similarity * 0.5 + snippet.confidence * 0.3 + 0.8 * 0.2
    assert math.isclose(snippet.score, expected, abs_tol=1e-3)


def test_chinese_query_finds_chinese_memory(memory, recaller):
    """A question in Chinese finds the Chinese memory that answers it, first."""
    database = put(memory, "我们决定使用PostgreSQL作为主数据库")
    put(memory, "周五下午部署新版本")
    put(memory, "The database backups run nightly")
    result = recall(recaller, "我们用什么数据库?", RecallConfig())
    assert result.snippets[0].id == database


def test_recall_never_reaches_another_group(memory, recaller):
    """A canary in group alpha is recalled in alpha and never in beta."""
    canary = f"canary{uuid.uuid4().hex[:10]}"
    put(memory, f"The vault word is {canary}")
    put(memory, "The vault word is hidden", scope_id="beta", group_id="beta")
    beta = recall(recaller, f"what is the vault word {canary}", group="beta")
    assert beta.snippets
    assert all(canary not in s.content for s in beta.snippets)
    alpha = recall(recaller, f"what is the vault word {canary}")
    assert canary in alpha.snippets[0].content


def test_returned_snippets_are_marked_used(memory, recaller):
    """Recall only reads; marking its result sets last_used_at on what it returned and on
    nothing it dropped."""
    used = put(memory, "Code freeze starts on the 20th")
    skipped = put(memory, "Code freeze starts soon", key="draft_freeze")
    result = recall(recaller, "code freeze")
    assert [s.id for s in result.snippets] == [used]
    assert memory.get(used).last_used_at is None
    recaller.mark_used(result, NOW)
    assert memory.get(used).last_used_at == NOW
    assert memory.get(skipped).last_used_at is None
    # Recalled again within the minute: not written again; after it, written.
    recaller.mark_used(result, NOW + timedelta(seconds=30))
    assert memory.get(used).last_used_at == NOW
    recaller.mark_used(result, NOW + timedelta(seconds=90))
    assert memory.get(used).last_used_at == NOW + timedelta(seconds=90)


def test_author_named_in_the_query_is_preferred(memory, recaller):
    """An entry written or said by someone the query names ranks above an equal one."""
    put(memory, "I adopted a cat last spring", extra={"speaker": "Melanie"}, agent="")
    said = put(memory, "I adopted a dog last spring", extra={"speaker": "Caroline"}, agent="")
    assert recall(recaller, "What did Caroline adopt?").snippets[0].id == said


class SynonymEmbedder:
    """Maps a few words to shared concepts, so meaning matches without shared words."""

    CONCEPTS: ClassVar[dict[str, int]] = {
        "car": 0,
        "automobile": 0,
        "vehicle": 0,
        "bike": 1,
        "bicycle": 1,
        "red": 2,
    }

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for value in texts:
            vector = [0.0, 0.0, 0.0, 0.01]
            for word in value.lower().replace("?", "").split():
                if word in self.CONCEPTS:
                    vector[self.CONCEPTS[word]] += 1.0
            vectors.append(vector)
        return vectors


def test_embeddings_find_what_full_text_misses(tmp_path):
    """With an embedder, a memory sharing meaning but no word with the query is recalled."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    memory = SessionMemory(engine, embedder=SynonymEmbedder())
    car = put(memory, "The red car is parked outside")
    put(memory, "A bicycle is in the hall")
    hybrid = recall(Recaller(memory), "where is the automobile", RecallConfig())
    assert [s.id for s in hybrid.snippets] == [car]
    full_text_only = recall(Recaller(SessionMemory(engine)), "where is the automobile")
    assert full_text_only.snippets == ()
    engine.dispose()


def test_recall_config_validates():
    """Out-of-range settings are refused."""
    with pytest.raises(ValidationError):
        RecallConfig(relevance_floor=1.5)
    with pytest.raises(ValidationError):
        RecallConfig(max_entries=-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We decided to use JWT tokens", {"we", "decid", "to", "use", "jwt", "token"}),
        ("snake_case, x-y", {"snake", "case", "x", "y"}),
        ("Bob's key: don't", {"bob", "key", "dont"}),
        ("数据库 cache", {"数据", "据库", "cache"}),
        ("Café ÉCOLE", {"café", "école"}),
    ],
)
def test_words_are_stemmed_tokens_and_cjk_bigrams(text, expected):
    """Plain text, apostrophes and CJK all give the same words coverage compares with."""
    assert fts.words(text) == expected


@pytest.mark.parametrize(
    "text",
    ["release 2026 builds 17 and 18", "v2 api 404s, 1st try", "٣٤ items ² costs", "migrated 12"],
)
def test_the_index_words_of_numbers_are_the_numbers(text):
    """A number is its own stem, as the index's Porter stemmer leaves it."""
    plain = [fts.porter(word) for word in fts.fold(text.lower()).replace(",", " ").split()]
    assert fts.tokens(text) == plain


# Earlier messages of the group, ranked with the memories ------------------------------------


def _said(engine, n: int, text: str, sender: str = "alex", kind=MessageKind.HUMAN) -> str:
    message = ChatMessage(
        id=f"{n}-0",
        group="alpha",
        sender=sender,
        kind=kind,
        text=text,
        created_at=NOW - timedelta(days=30, minutes=-n),
    )
    write_history(engine, message)
    return message.id


@pytest.fixture
def with_history(memory, engine):
    """Recall over memories and the group's messages."""
    return Recaller(memory, history=HistoryIndex(engine))


def test_a_cited_memory_outranks_a_message_saying_the_same(memory, engine, with_history):
    """At equal relevance, the curated, cited memory comes first; both are recalled."""
    entry = put(memory, "The staging database runs on Hetzner")
    said = _said(engine, 1, "The staging database runs on Hetzner")
    result = recall(with_history, "staging database Hetzner")
    assert [s.id for s in result.snippets] == [entry]
    assert [m.said.id for m in result.messages] == [said]
    assert result.snippets[0].score > result.messages[0].score


def test_only_messages_older_than_the_window_are_searched(memory, engine, with_history):
    """Messages from ``before_seq`` on are the history layer's: recall leaves them alone."""
    old = _said(engine, 1, "the invoice template uses the blue logo")
    _said(engine, 2, "the invoice template moved to the new folder")
    window_start = HistoryStore(engine).newest_seq("alpha")
    result = with_history.recall(
        "invoice template", group="alpha", agent="ping", config=OPEN, now=NOW,
        before_seq=window_start,
    )  # fmt: skip
    assert [m.said.id for m in result.messages] == [old]


def test_the_question_before_an_answer_comes_with_it(memory, engine, with_history):
    """A short hit answering another sender's question brings that question (the last one the
    message before it asks), and a question quoted whole is not shown again on its own; a hit
    after a plain statement, or after its own sender's message, comes alone."""
    _said(engine, 3, "Lunch is at noon.", sender="sam")
    question = _said(engine, 1, "Which port does the gateway listen on?", sender="sam")
    answer = _said(engine, 2, "The gateway listens on port 8443.")
    alone = _said(engine, 4, "The gateway certificate expires in May.")
    asks = _said(engine, 5, "Morning! Long weekend. Who renews the gateway certificate?", "sam")
    renews = _said(engine, 6, "The gateway certificate is renewed by ops.")
    result = recall(with_history, "gateway port certificate")
    found = {
        m.said.id: (m.previous.id if m.previous else None, m.question) for m in result.messages
    }
    assert found == {
        answer: (question, "Which port does the gateway listen on?"),
        alone: (None, ""),
        renews: (asks, "Who renews the gateway certificate?"),
        asks: (None, ""),  # quoted in part with its answer, so shown whole on its own too
    }


def test_a_long_answer_comes_without_the_question(memory, engine, with_history):
    """A message long enough to say what it is about is shown without the question before
    it; so is one whose previous message asks nothing."""
    _said(engine, 1, "What do we know about the gateway?", sender="sam")
    long = _said(engine, 2, "The gateway " + "handles retries and timeouts, " * 8 + "and logs.")
    result = recall(with_history, "gateway retries")
    assert [(m.said.id, m.previous, m.question) for m in result.messages][:1] == [(long, None, "")]


def test_people_rank_above_agents_restating_them(memory, engine, with_history):
    """An agent's reply quoting a person ranks below the person's own words, and is left out
    as a repeat of them; a reply that adds enough of its own is kept."""
    person = _said(engine, 1, "the audit log must keep ninety days")
    agent = _said(
        engine, 2, 'noted: "the audit log must keep ninety days"', "ping", MessageKind.AGENT
    )
    adds = _said(
        engine,
        3,
        "ninety days of audit log fit in two gigabytes, so the small volume will do",
        "pong",
        MessageKind.AGENT,
    )
    result = recall(with_history, "audit log ninety days")
    assert [m.said.id for m in result.messages] == [person, adds]
    assert result.messages[0].score > result.messages[1].score
    assert [(d.id, d.layer) for d in result.dropped] == [(agent, "repeat")]
    assert f"repeats message {person}" in result.dropped[0].reason


def test_message_candidates_under_the_floor_are_recorded(memory, engine, with_history):
    """A message sharing one word of several falls under the floor and says so."""
    weak = _said(engine, 2, "my bucket hat is lost", sender="sam")
    strong = _said(engine, 1, "the nightly export job writes parquet files to the bucket")
    result = recall(with_history, "nightly export parquet bucket", RecallConfig())
    assert [m.said.id for m in result.messages] == [strong]
    assert dropped_by(result, "relevance_floor") == {weak}
