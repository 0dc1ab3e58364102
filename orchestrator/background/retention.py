"""Retention: deleting old chat history and old archived memories, when asked to.

Both are off by default (``ARENA_HISTORY_RETENTION_DAYS`` and ``ARENA_ARCHIVE_RETENTION_DAYS``
are 0): nothing is deleted unless a limit is set.

- History: a group's messages older than the limit are deleted only once the group's rolling
  summary covers them (the summary is their only remaining trace, and the next summary reads
  the messages after the last one). Messages not yet summarised are kept, and counted.
- Archived memories: superseded and forgotten entries are deleted once they have been so for
  longer than the limit; ``arena memory restore`` cannot bring them back afterwards.

``MEMORY.md`` versions, summary versions (the growth log) and daily logs are never deleted.
Runs daily as an RQ job (:func:`orchestrator.background.jobs.prune_job`) and on demand
(``arena prune``).
Everything here blocks: call it through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.versions.store import VersionStore
from orchestrator.settings import Settings

__all__ = ["PruneReport", "enabled", "prune"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove).

    ``messages`` and ``kept_unsummarised`` are by group; a cutoff is None when that retention
    is off.
    """

    dry_run: bool
    history_before: datetime | None
    archive_before: datetime | None
    messages: dict[str, int] = field(default_factory=dict)
    kept_unsummarised: dict[str, int] = field(default_factory=dict)
    memories: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena prune --json``, the job's result)."""
        return {
            "dry_run": self.dry_run,
            "history_before": self.history_before.isoformat() if self.history_before else None,
            "archive_before": self.archive_before.isoformat() if self.archive_before else None,
            "messages": dict(self.messages),
            "messages_total": sum(self.messages.values()),
            "kept_unsummarised": dict(self.kept_unsummarised),
            "memories": self.memories,
        }


def enabled(settings: Settings) -> bool:
    """Whether any retention limit is set."""
    return bool(settings.history_retention_days or settings.archive_retention_days)


def prune(
    engine: Engine, settings: Settings, now: datetime, *, dry_run: bool = False
) -> PruneReport:
    """Delete what the retention settings say is too old at ``now`` (aware).

    Args:
        engine: The database.
        settings: ``history_retention_days`` and ``archive_retention_days`` (0: keep all).
        now: The time the ages are measured from.
        dry_run: Count what would be deleted and delete nothing.
    """
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone")
    history_before = archive_before = None
    messages: dict[str, int] = {}
    kept: dict[str, int] = {}
    if settings.history_retention_days:
        history_before = now - timedelta(days=settings.history_retention_days)
        messages, kept = _prune_history(engine, history_before, dry_run)
    memories = 0
    if settings.archive_retention_days:
        archive_before = now - timedelta(days=settings.archive_retention_days)
        memories = SessionMemory(engine).delete_archived_before(archive_before, dry_run=dry_run)
    report = PruneReport(
        dry_run=dry_run,
        history_before=history_before,
        archive_before=archive_before,
        messages=messages,
        kept_unsummarised=kept,
        memories=memories,
    )
    logger.info(
        "prune%s: %d messages, %d archived memories; %d old messages kept (not summarised)",
        " (dry run)" if dry_run else "",
        sum(messages.values()),
        memories,
        sum(kept.values()),
    )
    return report


def _prune_history(
    engine: Engine, before: datetime, dry_run: bool
) -> tuple[dict[str, int], dict[str, int]]:
    store = HistoryStore(engine)
    versions = VersionStore(engine)
    removed: dict[str, int] = {}
    kept: dict[str, int] = {}
    for group, old in store.count_before(before).items():
        covered = _covered(versions, group)
        if dry_run:
            n = store.count_before(before, group=group, upto_seq=covered).get(group, 0)
        else:
            n = store.delete_before(before, group=group, upto_seq=covered)
        if n:
            removed[group] = n
        if old > n:
            kept[group] = old - n
    return removed, kept


def _covered(versions: VersionStore, group: str) -> int:
    """The last message the group's newest generated summary covered (0: none yet)."""
    for version in reversed(versions.history("summary", group)):
        if "upto_seq" in version.source:
            return int(version.source["upto_seq"])
    return 0
