"""What ``GET /api/memories`` answers: the newest memories matching filters, or a search with
the recall an agent's turn runs (its own settings, its scopes), each hit with its score, its
trust label and, for what a turn would leave out, the layer and the reason."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from orchestrator.memory.audit import pinned_ids
from orchestrator.memory.recall.ranking import trust_of
from orchestrator.memory.recall.recaller import RecallConfig, Recaller, RecallResult
from orchestrator.memory.session.records import MemoryRecord
from orchestrator.memory.session.store import SessionMemory
from orchestrator.web.schemas_memory import (
    LeftOut,
    MemoryEntry,
    MemoryList,
    MemorySearch,
    RecallHit,
)
from orchestrator.web.state import Console

__all__ = ["search_memories"]

_MAX_GROUPS = 50


def search_memories(
    running: Console,
    engine: Engine,
    *,
    q: str | None,
    group: str | None,
    agent: str | None,
    type: str | None,
    status: str | None,
    written_by: str | None,
    limit: int,
) -> MemoryList | MemorySearch:
    """The API's answer; ``agent`` is the recalling agent with ``q``, the writer without.

    Raises:
        ValidationError: ``agent`` is not one of the team's.
    """
    session = running.wiring.session
    if not q:
        records = session.list(
            scope="session" if group else None,
            scope_id=group,
            type=type,
            status=status,
            agent=agent,
            written_by=written_by,
            limit=limit,
        )
        pinned = _pinned(engine, [r.id for r in records])
        return MemoryList(
            memories=[
                MemoryEntry.model_validate({**r.as_dict(), "pinned": r.id in pinned})
                for r in records
            ]
        )
    team = running.wiring.team
    spec = team.get(agent if agent is not None else team.router.default)
    config = running.wiring.tuning.recall(spec)
    groups = [group] if group else _groups(session)
    hits: list[RecallHit] = []
    for name in groups:
        hits += _recalled(engine, session, config, q, name, spec.id)
    hits = [
        h
        for h in hits
        if (type is None or h.type == type) and (written_by is None or h.written_by == written_by)
    ]
    hits.sort(key=lambda h: (not h.kept, -(h.score or 0.0), -h.id))
    return MemorySearch(query=q, agent=spec.id, memories=hits[:limit])


def _groups(session: SessionMemory) -> list[str]:
    return sorted({i for scope, i in session.scopes() if scope == "session"})[:_MAX_GROUPS]


def _pinned(engine: Engine, ids: list[int]) -> set[int]:
    if not ids:
        return set()
    with engine.connect() as conn:
        return pinned_ids(conn, ids)


def _recalled(
    engine: Engine,
    session: SessionMemory,
    config: RecallConfig,
    q: str,
    group: str,
    agent: str,
) -> list[RecallHit]:
    """Recall for ``agent`` in ``group`` as its turn would run it (memories only)."""
    result: RecallResult = Recaller(session).recall(
        q, group=group, agent=agent, config=config, now=datetime.now(UTC), messages=False
    )
    ids = [s.id for s in result.snippets] + [d.id for d in result.dropped if isinstance(d.id, int)]
    records = session.records(ids)
    pinned = _pinned(engine, list(records))
    hits = [
        _hit(records[s.id], s.score, s.similarity, s.trust, pinned, group)
        for s in result.snippets
        if s.id in records
    ]
    for dropped in result.dropped:
        record = records.get(dropped.id) if isinstance(dropped.id, int) else None
        if record is not None:
            left_out = LeftOut(layer=dropped.layer, reason=dropped.reason)
            hits.append(_hit(record, None, None, trust_of(record), pinned, group, dropped=left_out))
    return hits


def _hit(
    record: MemoryRecord,
    score: float | None,
    similarity: float | None,
    trust: str,
    pinned: set[int],
    group: str,
    *,
    dropped: LeftOut | None = None,
) -> RecallHit:
    """A memory as recall found it (``dropped``: why a turn would leave it out)."""
    return RecallHit.model_validate(
        {
            **record.as_dict(),
            "recalled_in": group,
            "score": score,
            "similarity": similarity,
            "trust": trust,
            "pinned": record.id in pinned,
            "kept": dropped is None,
            "dropped": dropped,
        }
    )
