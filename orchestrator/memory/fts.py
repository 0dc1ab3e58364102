"""Full-text search over memory entries: text preparation and the dialect-specific SQL.

Each entry keeps two searchable texts next to its content: ``search_body`` (the content) and
``search_meta`` (tags, key and metadata such as a speaker, a date or the neighbouring turn).
The body weighs twice as much as the metadata in the ranking.

- SQLite: an FTS5 table over those two columns (external content, kept in sync by triggers),
  Porter stemming on top of the ``unicode61`` tokenizer, ranked with ``bm25()``.
- PostgreSQL: a generated ``tsvector`` column (English configuration, body weight A, metadata
  weight B) with a GIN index, ranked with ``ts_rank``.

Neither tokenizer splits Chinese or Japanese into words, so runs of CJK characters are indexed
and queried as overlapping character bigrams (``数据库`` → ``数据 据库``). Queries are reduced to
their content words (stop words dropped) and joined with OR, so an entry need not contain every
word of a question to be found.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from sqlalchemy import text
from sqlalchemy.engine import Connection

__all__ = [
    "BODY_WEIGHT",
    "META_WEIGHT",
    "index_text",
    "install",
    "query_terms",
    "search_ids",
    "stem",
    "words",
]

BODY_WEIGHT = 1.0
META_WEIGHT = 0.5

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN_RE = re.compile(f"[{_CJK}]+")
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_]+(?:'[^\W_]+)*", re.UNICODE)
_SUFFIXES = ("ing", "ies", "ied", "ed", "es", "ly", "s")

_STOP_TEXT = """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing don down during each ever few
    for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me might more most must my myself no nor not now of off on once
    only or other our ours ourselves out over own same shall she should so some such than that
    the their theirs them themselves then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your yours
    yourself yourselves
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())

# Stop words in Chinese questions: a bigram made only of these characters says nothing.
_CJK_STOP_CHARS = frozenset("的了是在吗呢吧啊么什哪谁怎我你他她它们这那有和与就都也")

_SQLITE_DDL = (
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
        search_body, search_meta,
        content='memory_entries', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_ai AFTER INSERT ON memory_entries BEGIN
        INSERT INTO memory_fts(rowid, search_body, search_meta)
        VALUES (new.id, new.search_body, new.search_meta);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_ad AFTER DELETE ON memory_entries BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, search_body, search_meta)
        VALUES ('delete', old.id, old.search_body, old.search_meta);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_au AFTER UPDATE OF search_body, search_meta
    ON memory_entries BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, search_body, search_meta)
        VALUES ('delete', old.id, old.search_body, old.search_meta);
        INSERT INTO memory_fts(rowid, search_body, search_meta)
        VALUES (new.id, new.search_body, new.search_meta);
    END
    """,
)

_POSTGRES_DDL = (
    """
    ALTER TABLE memory_entries ADD COLUMN IF NOT EXISTS search_tsv tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, coalesce(search_body, '')), 'A')
        || setweight(to_tsvector('english'::regconfig, coalesce(search_meta, '')), 'B')
    ) STORED
    """,
    "CREATE INDEX IF NOT EXISTS ix_memory_entries_search_tsv "
    "ON memory_entries USING GIN (search_tsv)",
)


def install(conn: Connection) -> None:
    """Create the full-text index if it is missing (idempotent; run after ``create_all``)."""
    statements: tuple[str, ...] = _SQLITE_DDL
    if conn.dialect.name != "sqlite":
        # Two processes starting at once must not both add the column.
        conn.execute(text("SELECT pg_advisory_xact_lock(727274)"))
        statements = _POSTGRES_DDL
    for statement in statements:
        conn.execute(text(statement))


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def index_text(value: str) -> str:
    """The text as the index should see it: CJK runs become space-separated bigrams."""
    return _CJK_RUN_RE.sub(lambda m: " " + " ".join(_bigrams(m.group())) + " ", value).strip()


def query_terms(query: str) -> list[str]:
    """The content words of a query, lower-cased, in order, without repeats.

    Stop words are dropped ("what did we decide about the database" → decide, database);
    a possessive ``'s`` is removed; CJK runs become bigrams, minus those made only of
    function characters. A query of nothing but stop words keeps its words.
    """
    words: list[str] = []
    fallback: list[str] = []
    for token in _TOKEN_RE.findall(query.lower()):
        if _CJK_RUN_RE.fullmatch(token):
            grams = _bigrams(token)
            fallback.extend(grams)
            words.extend(g for g in grams if not set(g) <= _CJK_STOP_CHARS)
            continue
        token = token.removesuffix("'s").replace("'", "")
        fallback.append(token)
        if token not in STOP_WORDS:
            words.append(token)
    return list(dict.fromkeys(words or fallback))


def words(value: str) -> set[str]:
    """The stemmed words (and CJK bigrams) of a text, to compare with :func:`query_terms`."""
    found: set[str] = set()
    for token in _TOKEN_RE.findall(value.lower()):
        if _CJK_RUN_RE.fullmatch(token):
            found.update(_bigrams(token))
        else:
            found.add(stem(token.removesuffix("'s").replace("'", "")))
    return found


@lru_cache(maxsize=65536)  # recall stems every candidate's words, the same few thousand
def stem(word: str) -> str:
    """A light suffix stripper, to compare words in Python (the index stems on its own)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _scope_clause(scopes: Sequence[tuple[str, str]], params: dict[str, object]) -> str:
    parts = []
    for n, (scope, scope_id) in enumerate(scopes):
        params[f"scope{n}"] = scope
        params[f"scope_id{n}"] = scope_id
        parts.append(f"(m.scope = :scope{n} AND m.scope_id = :scope_id{n})")
    return "(" + " OR ".join(parts) + ")"


def search_ids(
    conn: Connection, terms: Sequence[str], scopes: Sequence[tuple[str, str]], limit: int
) -> list[tuple[int, float]]:
    """Ids of active entries in ``scopes`` that match any of ``terms``, best first.

    Returns:
        ``(id, score)`` pairs; a higher score is more relevant. Scores are comparable within
        one call only (BM25 on SQLite, ``ts_rank`` on PostgreSQL).
    """
    if not terms or not scopes or limit <= 0:
        return []
    params: dict[str, object] = {"limit": limit}
    where = _scope_clause(scopes, params)
    if conn.dialect.name == "sqlite":
        # Each term is quoted as an FTS5 string, so nothing in it is read as syntax.
        params["match"] = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        # The ids of the scopes' active entries come from an index, once per query, and each
        # match is tested against them: looking every match up in the (wide) entries table
        # costs far more. The "+" keeps that test away from FTS5, which would otherwise run
        # one full-text query per id.
        sql = f"""
            SELECT memory_fts.rowid AS id,
                   -bm25(memory_fts, {BODY_WEIGHT}, {META_WEIGHT}) AS score
            FROM memory_fts
            WHERE memory_fts MATCH :match AND +memory_fts.rowid IN (
                SELECT m.id FROM memory_entries AS m WHERE m.status = 'active' AND {where}
            )
            ORDER BY score DESC, id DESC LIMIT :limit
        """
    else:
        # websearch syntax: bare words joined by "or", so no term can inject an operator.
        params["match"] = " or ".join(re.sub(r"[^\w]+", " ", t) for t in terms)
        sql = f"""
            SELECT m.id, ts_rank(m.search_tsv, q.query, 1) AS score
            FROM memory_entries AS m,
                 websearch_to_tsquery('english'::regconfig, :match) AS q(query)
            WHERE m.search_tsv @@ q.query AND m.status = 'active' AND {where}
            ORDER BY score DESC, m.id DESC LIMIT :limit
        """
    return [(int(row[0]), float(row[1])) for row in conn.execute(text(sql), params)]
