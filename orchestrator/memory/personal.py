"""Each agent's personal daily log: ``workspaces/<agent>/memory/YYYY-MM-DD.md``.

A log is Markdown, one heading and one bullet per note, dated in the configured time zone::

    # architect — 2025-01-02

    - 07:30 [lesson] Ask for the expected load first (source: demo/msg-42)

Appends are atomic and never lose a line, across threads and processes: each takes the
agent's ``memory/`` folder lock (:func:`orchestrator.files.locked_folder`), reads the log and
writes the whole new text with :func:`orchestrator.files.write_atomic`. A reader sees the old
file or the new one, never half of one, and a crash leaves one of the two. Everything here
blocks: call it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import stat
import time
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from orchestrator.core.agents import workspace_dir
from orchestrator.core.markers import neutralise
from orchestrator.errors import ValidationError
from orchestrator.files import locked_folder, remove_stale_temps, write_atomic
from orchestrator.memory.schema import PersonalDraft

__all__ = ["PersonalLog"]

logger = logging.getLogger(__name__)

MEMORY_FOLDER = "memory"
_LOG_NAME_RE = re.compile(r"(\d{4}-\d{2}-\d{2})\.md")
_NEW_FILE_MODE = 0o644
_LOGS_KEPT = 4096


class PersonalLog:
    """Reads and appends the daily logs of every agent under one workspaces folder."""

    # Reads trust a folder's check this long; writes check every time.
    READ_CHECK_S = 5.0

    def __init__(
        self,
        workspaces: Path,
        tz: ZoneInfo,
        *,
        reader: Callable[[Path | str], str] | None = None,
    ) -> None:
        self.workspaces = workspaces
        self.tz = tz
        self._read = reader or _read  # a turn reads two days' logs: a cache may answer
        self._checked: dict[str, tuple[float, Path, Path]] = {}
        # Each log read lately, by agent and day: the folder checked, and the log's path.
        self._logs: dict[tuple[str, date], tuple[Path, str]] = {}

    def path(self, agent_id: str, day: date) -> Path:
        """The log of ``agent_id`` for ``day``, whether or not it exists.

        Raises:
            ValidationError: if ``agent_id`` is not a valid id or would leave the workspaces.
        """
        return self._folder(agent_id) / f"{day.isoformat()}.md"

    def append(self, agent_id: str, draft: PersonalDraft, *, source: str, now: datetime) -> Path:
        """Add one note to the agent's log for the day ``now`` falls on in the time zone.

        The note becomes ``- HH:MM [type] content (source: <source>)`` on one line: line breaks
        in the content become spaces and marker-shaped text is made inert, so that reading the
        log back into a prompt can never plant a memory.

        Args:
            agent_id: whose log.
            draft: the validated note.
            source: where it came from, e.g. ``"<group>/<message id>"``.
            now: when it was written; must carry a time zone.

        Returns:
            The log's path.

        Raises:
            ValidationError: if ``agent_id`` is not a valid id or would leave the workspaces.
            ValueError: if ``now`` is naive.
        """
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("now must carry a time zone")
        local = now.astimezone(self.tz)
        path = self.path(agent_id, local.date())
        line = f"- {local:%H:%M} [{draft.type}] {_one_line(draft.content)}"
        line += f" (source: {_one_line(source)})\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        # Every writer of the folder's logs takes this lock.
        with locked_folder(path.parent):
            remove_stale_temps(path)
            current = _read(path)
            if _already_noted(current, line):
                # The same note from the same source: a turn replayed after a crash.
                return path
            if not current:
                current = f"# {agent_id} — {local.date().isoformat()}\n\n"
            elif not current.endswith("\n"):
                current += "\n"  # the file was edited by hand
            write_atomic(path, current + line, mode=_mode_of(path))
        logger.debug("appended a %s note to %s", draft.type, path)
        return path

    def read(self, agent_id: str, day: date) -> str:
        """The agent's log for ``day``; ``""`` if there is none."""
        return _read(self.path(agent_id, day))

    def read_days(self, agent_id: str, days: list[date]) -> list[str]:
        """The agent's logs for ``days`` (``""`` for a day without one)."""
        folder = self._folder_for_reading(agent_id)
        return [self._read(self._log_of(agent_id, folder, day)) for day in days]

    def _log_of(self, agent_id: str, folder: Path, day: date) -> str:
        """The path of the log of ``day`` in ``folder``, ``agent_id``'s (made once while the
        folder's check holds: a turn reads the same two logs as the turn before)."""
        known = self._logs.get((agent_id, day))
        if known is not None and known[0] is folder:
            return known[1]
        if len(self._logs) >= _LOGS_KEPT:
            self._logs.clear()
        path = str(folder / f"{day.isoformat()}.md")
        self._logs[(agent_id, day)] = (folder, path)
        return path

    def workspace(self, agent_id: str) -> Path:
        """The agent's workspace folder, to read its files (checked as for reading logs).

        Raises:
            ValidationError: if ``agent_id`` is not a valid id or would leave the workspaces.
        """
        return self._checked_for_reading(agent_id)[2]

    def _folder_for_reading(self, agent_id: str) -> Path:
        """``_folder``, whose check (a dozen system calls resolving links) every turn would
        repeat, trusted for ``READ_CHECK_S``: a link put in meanwhile is read through for at
        most that long, and never written through."""
        return self._checked_for_reading(agent_id)[1]

    def _checked_for_reading(self, agent_id: str) -> tuple[float, Path, Path]:
        """When ``agent_id``'s folder was checked, the folder and its workspace (the same
        objects while the check holds)."""
        now = time.monotonic()
        checked = self._checked.get(agent_id)
        if checked is not None and now - checked[0] < self.READ_CHECK_S:
            return checked
        folder = self._folder(agent_id)
        checked = self._checked[agent_id] = (now, folder, folder.parent)
        return checked

    def days(self, agent_id: str) -> list[date]:
        """The days the agent has a log for, oldest first."""
        folder = self._folder(agent_id)
        if not folder.is_dir():
            return []
        found: list[date] = []
        for entry in folder.iterdir():
            match = _LOG_NAME_RE.fullmatch(entry.name)
            if match is None or not entry.is_file():
                continue
            with contextlib.suppress(ValueError):  # e.g. 2025-02-30.md
                found.append(date.fromisoformat(match.group(1)))
        return sorted(found)

    def _folder(self, agent_id: str) -> Path:
        workspace = workspace_dir(self.workspaces, agent_id)
        folder = workspace / MEMORY_FOLDER
        # A memory/ folder that is a link out of the workspace is never written through.
        if not folder.resolve().is_relative_to(workspace.resolve()):
            raise ValidationError(
                "agent_id", f"{agent_id}'s memory folder leads out of its workspace"
            )
        return folder


def _one_line(text: str) -> str:
    """Line breaks (of any kind) become single spaces; marker-shaped text is made inert."""
    parts = (part.strip() for part in text.splitlines())
    return neutralise(" ".join(part for part in parts if part))


def _read(path: Path | str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        return ""


def _already_noted(current: str, line: str) -> bool:
    """Whether ``current`` has ``line`` already, whatever the minute it was written at."""
    body = line.strip().split(" ", 2)[2]  # without "- HH:MM"
    return any(
        existing.strip().split(" ", 2)[2:] == [body]
        for existing in current.splitlines()
        if existing.startswith("- ")
    )


def _mode_of(path: Path) -> int:
    """The log's permission bits, kept across a rewrite; a new log is readable by all."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return _NEW_FILE_MODE
