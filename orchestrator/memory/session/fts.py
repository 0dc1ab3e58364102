"""Full-text search over memory entries: text preparation and the dialect-specific SQL.

Each entry keeps two searchable texts next to its content: ``search_body`` (the content) and
``search_meta`` (tags, key and metadata such as a speaker, a date or the neighbouring turn).
The body weighs twice as much as the metadata in the ranking.

- SQLite: an FTS5 table over those two columns and a third, ``search_scope``, that holds the
  scope key of an active entry (external content through a view, kept in sync by triggers),
  Porter stemming on top of the ``unicode61`` tokenizer, ranked with ``bm25()``.
- PostgreSQL: a generated ``tsvector`` column (English configuration, body weight A, metadata
  weight B) and a generated ``search_scope`` array with the scope key of an active entry, under
  one GIN index over both, ranked with ``ts_rank``.

A search asks for ``scope key AND (words)``, so the index visits the entries of the scopes
searched, not every entry that shares a word with the question. :func:`install` migrates an
index of an older shape on start.

Neither tokenizer splits Chinese or Japanese into words, so runs of CJK characters are indexed
and queried as overlapping character bigrams (``数据库`` → ``数据 据库``). Queries are reduced to
their content words (stop words dropped) and joined with OR, so an entry need not contain every
word of a question to be found.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache

import snowballstemmer
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

logger = logging.getLogger(__name__)

__all__ = [
    "BODY_WEIGHT",
    "META_WEIGHT",
    "fold",
    "fts5_phrase",
    "index_text",
    "install",
    "porter",
    "postgres_needs_install",
    "query_terms",
    "scope_key",
    "search_ids",
    "sqlite_needs_install",
    "stem",
    "tokens",
    "websearch_query",
    "words",
]

BODY_WEIGHT = 1.0
META_WEIGHT = 0.5

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN_RE = re.compile(f"[{_CJK}]+")
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_]+(?:'[^\W_]+)*", re.UNICODE)
_PLAIN_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
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

# The scope key of an active entry, as one index token: "s", the hex of "scope:scope_id", "0".
# Hex keeps any group or agent id a single token; the final digit keeps Porter stemming off it.
# Entries that are not active get no key, so a search never sees them.
_SQLITE_SCOPE_KEY = (
    "CASE WHEN {row}status = 'active' "
    "THEN 's' || lower(hex({row}scope || ':' || {row}scope_id)) || '0' ELSE '' END"
)
_SQLITE_COLUMNS = "search_body, search_meta, search_scope"


def _sqlite_values(row: str) -> str:
    key = _SQLITE_SCOPE_KEY.format(row=f"{row}.")
    return f"{row}.id, {row}.search_body, {row}.search_meta, {key}"


# Each object by name, as ``sqlite_master`` keeps it: a database whose objects differ is
# migrated by :func:`install`. The view is the FTS5 table's content (for ``rebuild`` and
# ``integrity-check``); the triggers keep the index in step with the entries.
_SQLITE_OBJECTS = {
    "memory_fts_source": f"""
        CREATE VIEW memory_fts_source AS
        SELECT id, search_body, search_meta, {_SQLITE_SCOPE_KEY.format(row="")} AS search_scope
        FROM memory_entries
    """,
    "memory_fts": f"""
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            {_SQLITE_COLUMNS},
            content='memory_fts_source', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        )
    """,
    "memory_fts_ai": f"""
        CREATE TRIGGER memory_fts_ai AFTER INSERT ON memory_entries BEGIN
            INSERT INTO memory_fts(rowid, {_SQLITE_COLUMNS}) VALUES ({_sqlite_values("new")});
        END
    """,
    "memory_fts_ad": f"""
        CREATE TRIGGER memory_fts_ad AFTER DELETE ON memory_entries BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, {_SQLITE_COLUMNS})
            VALUES ('delete', {_sqlite_values("old")});
        END
    """,
    "memory_fts_au": f"""
        CREATE TRIGGER memory_fts_au
        AFTER UPDATE OF search_body, search_meta, status, scope, scope_id ON memory_entries
        BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, {_SQLITE_COLUMNS})
            VALUES ('delete', {_sqlite_values("old")});
            INSERT INTO memory_fts(rowid, {_SQLITE_COLUMNS}) VALUES ({_sqlite_values("new")});
        END
    """,
}
_SQLITE_TRIGGERS = ("memory_fts_ai", "memory_fts_ad", "memory_fts_au")

# PostgreSQL: the scope key of an active entry in an array column, searched with ``&&``
# through one GIN index over it and the text, so a search visits only its scopes' entries.
_POSTGRES_INDEX = "ix_memory_entries_search_scope_tsv"
_POSTGRES_OLD_INDEX = "ix_memory_entries_search_tsv"
_POSTGRES_DDL = (
    """
    ALTER TABLE memory_entries ADD COLUMN IF NOT EXISTS search_tsv tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, coalesce(search_body, '')), 'A')
        || setweight(to_tsvector('english'::regconfig, coalesce(search_meta, '')), 'B')
    ) STORED
    """,
    """
    ALTER TABLE memory_entries ADD COLUMN IF NOT EXISTS search_scope text[]
    GENERATED ALWAYS AS (
        CASE WHEN status = 'active' THEN ARRAY[scope || ':' || scope_id] ELSE '{}'::text[] END
    ) STORED
    """,
    f"CREATE INDEX IF NOT EXISTS {_POSTGRES_INDEX} "
    "ON memory_entries USING GIN (search_scope, search_tsv)",
    f"DROP INDEX IF EXISTS {_POSTGRES_OLD_INDEX}",
)


def install(conn: Connection) -> None:
    """Create the full-text index, or bring an older one to the current shape.

    Idempotent, and cheap when nothing needs doing (one catalogue query), so it runs on every
    start (after ``create_all``). A migration rebuilds only the index, from the entries, in one
    transaction; the entries themselves are never changed.
    """
    if conn.dialect.name == "sqlite":
        _install_sqlite(conn)
    else:
        _install_postgres(conn)


def _sqlite_is_current(conn: Connection, objects: Mapping[str, str]) -> bool:
    names = ", ".join(f"'{name}'" for name in objects)
    rows = conn.execute(text(f"SELECT name, sql FROM sqlite_master WHERE name IN ({names})"))
    stored: dict[str, str] = {str(name): str(sql) for name, sql in rows}
    return all(_same_sql(stored.get(name), statement) for name, statement in objects.items())


def _same_sql(stored: str | None, statement: str) -> bool:
    return stored is not None and stored.split() == statement.split()


def sqlite_needs_install(conn: Connection, objects: Mapping[str, str]) -> bool:
    """Whether the database's ``objects`` (by name, as ``sqlite_master`` keeps them) differ
    from these statements, whitespace aside.

    When they do, the connection holds the write transaction on return (taken now, not at the
    first write) for the check and the whole migration: a second process starting at once
    waits, then finds the work done.
    """
    if _sqlite_is_current(conn, objects):
        return False
    if not getattr(conn.connection.dbapi_connection, "in_transaction", False):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    return not _sqlite_is_current(conn, objects)


def postgres_needs_install(conn: Connection, current: TextClause, lock: int) -> bool:
    """Whether ``current`` (a query of one boolean) says the index needs work; when it does,
    the transaction holds the advisory ``lock`` on return, so two processes starting at once
    do not both change the table."""
    if conn.execute(current).scalar_one():
        return False
    conn.execute(text(f"SELECT pg_advisory_xact_lock({lock})"))
    return not conn.execute(current).scalar_one()


def _install_sqlite(conn: Connection) -> None:
    if not sqlite_needs_install(conn, _SQLITE_OBJECTS):
        return
    fresh = conn.execute(text("SELECT count(*) FROM sqlite_master WHERE name = 'memory_fts'"))
    if fresh.scalar_one():
        logger.warning("rebuilding the full-text index of memory entries in its new shape")
    for name in _SQLITE_TRIGGERS:
        conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
    conn.execute(text("DROP TABLE IF EXISTS memory_fts"))
    conn.execute(text("DROP VIEW IF EXISTS memory_fts_source"))
    for statement in _SQLITE_OBJECTS.values():
        conn.execute(text(statement))
    conn.execute(text("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')"))


def _install_postgres(conn: Connection) -> None:
    current = text(
        f"SELECT to_regclass('{_POSTGRES_INDEX}') IS NOT NULL "
        f"AND to_regclass('{_POSTGRES_OLD_INDEX}') IS NULL"
    )
    if not postgres_needs_install(conn, current, lock=727274):
        return
    logger.warning("building the scoped full-text index of memory entries")
    # Building a GIN index over many rows goes much faster with room to sort in.
    conn.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
    for statement in _POSTGRES_DDL:
        conn.execute(text(statement))


def scope_key(scope: str, scope_id: str) -> str:
    """The index token of a scope's active entries on SQLite (see ``_SQLITE_SCOPE_KEY``)."""
    return "s" + f"{scope}:{scope_id}".encode().hex() + "0"


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
    lowered = value.lower()
    if "'" not in lowered and _CJK_RUN_RE.search(lowered) is None:
        # Recall compares every candidate's text: most have neither CJK nor apostrophes,
        # and then each token is a plain run of word characters.
        return {stem(token) for token in _PLAIN_TOKEN_RE.findall(lowered)}
    found: set[str] = set()
    for token in _TOKEN_RE.findall(lowered):
        if _CJK_RUN_RE.fullmatch(token):
            found.update(_bigrams(token))
        else:
            found.add(stem(token.removesuffix("'s").replace("'", "")))
    return found


def tokens(value: str) -> list[str]:
    """The words of a text in order, repeats kept, as the index's tokenizer reads them:
    accents removed (``café`` → ``cafe``), Porter-stemmed (:func:`porter`; a number is its
    own stem, not looked up: a new one in most messages took 20 µs), CJK runs as bigrams. What
    :mod:`orchestrator.memory.session.resident` counts, and how it reads a query's terms."""
    lowered = fold(value.lower())
    if "'" not in lowered and _CJK_RUN_RE.search(lowered) is None:
        return [t if t.isdigit() else porter(t) for t in _PLAIN_TOKEN_RE.findall(lowered)]
    found: list[str] = []
    for token in _TOKEN_RE.findall(index_text(lowered)):
        if _CJK_RUN_RE.fullmatch(token):
            found.append(token)  # a bigram (or a lone character), as index_text made it
        else:
            found.append(porter(token.removesuffix("'s").replace("'", "")))
    return found


_PORTER = snowballstemmer.stemmer("porter")
_PORTER_LOCK = threading.Lock()  # a stemmer keeps state while it stems a word


@lru_cache(maxsize=131072)
def porter(word: str) -> str:
    """The Porter stem of a lower-cased word, as the index's ``porter`` tokenizer gives it."""
    with _PORTER_LOCK:
        return str(_PORTER.stemWord(word))


def fold(value: str) -> str:
    """``value`` without accents (``é`` → ``e``), as ``remove_diacritics`` reads it."""
    if value.isascii():
        return value
    decomposed = unicodedata.normalize("NFKD", value)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@lru_cache(maxsize=65536)  # recall stems every candidate's words, the same few thousand
def stem(word: str) -> str:
    """A light suffix stripper, to compare words in Python (the index stems on its own)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def fts5_phrase(term: str) -> str:
    """``term`` as an FTS5 string, so nothing in it is read as query syntax."""
    return '"' + term.replace('"', '""') + '"'


def websearch_query(terms: Sequence[str]) -> str:
    """``terms`` as bare words joined by "or", for ``websearch_to_tsquery``: no term can
    inject an operator."""
    return " or ".join(re.sub(r"[^\w]+", " ", t) for t in terms)


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

    The index itself is narrowed to the scopes, so the cost follows their entries, not the
    whole store.

    Returns:
        ``(id, score)`` pairs; a higher score is more relevant. Scores are comparable within
        one call only (BM25 on SQLite, ``ts_rank`` on PostgreSQL).
    """
    if not terms or not scopes or limit <= 0:
        return []
    params: dict[str, object] = {"limit": limit}
    if conn.dialect.name == "sqlite":
        # Each term is quoted as an FTS5 string, so nothing in it is read as syntax. The scope
        # keys are matched in their own column only; the words need no column filter (a word
        # equal to a scope key could only match entries of that scope, with weight 0).
        keys = " OR ".join(f'"{scope_key(scope, scope_id)}"' for scope, scope_id in scopes)
        words = " OR ".join(fts5_phrase(t) for t in terms)
        params["match"] = f"search_scope : ({keys}) AND ({words})"
        sql = f"""
            SELECT rowid AS id,
                   -bm25(memory_fts, {BODY_WEIGHT}, {META_WEIGHT}, 0.0) AS score
            FROM memory_fts WHERE memory_fts MATCH :match
            ORDER BY score DESC, id DESC LIMIT :limit
        """
    else:
        where = _scope_clause(scopes, params)
        params["keys"] = [f"{scope}:{scope_id}" for scope, scope_id in scopes]
        params["match"] = websearch_query(terms)
        # ``search_scope &&`` lets the GIN index over (search_scope, search_tsv) narrow the
        # text match to the scopes; the plain column test below stays as the exact check.
        sql = f"""
            SELECT m.id, ts_rank(m.search_tsv, q.query, 1) AS score
            FROM memory_entries AS m,
                 websearch_to_tsquery('english'::regconfig, :match) AS q(query)
            WHERE m.search_scope && CAST(:keys AS text[]) AND m.search_tsv @@ q.query
              AND m.status = 'active' AND {where}
            ORDER BY score DESC, m.id DESC LIMIT :limit
        """
    return [(int(row[0]), float(row[1])) for row in conn.execute(text(sql), params)]
