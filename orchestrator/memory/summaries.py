"""A group's rolling summary as a file: where it is kept and reading it.

The summary's versions are kept by :class:`~orchestrator.memory.versions.store.VersionStore` (the
background job writes it through it); this module needs no database, so that reading a
summary (``arena summary``, an agent's context) loads none.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["read_summary", "summary_path"]


def summary_path(data_dir: Path, group: str) -> Path:
    """Where a group's rolling summary is kept."""
    return data_dir / "memory" / f"summary_{group}.md"


def read_summary(data_dir: Path, group: str) -> str:
    """The group's summary, or ``""`` when it has none yet."""
    try:
        return summary_path(data_dir, group).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
