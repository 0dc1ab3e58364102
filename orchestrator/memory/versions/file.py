"""A file whose every version is kept in the growth log: an agent's ``MEMORY.md`` or a
group's summary, and the rule a generated text must pass to become a version.

:class:`VersionedFile` ties the file on disk to its versions in
:class:`orchestrator.memory.versions.store.VersionStore`: it records a hand edit found on disk as a
version of its own (trigger ``"edited"``, or ``"initial"`` for the first one), and replaces the
file only if nobody changed it since it was read. Everything here blocks: call it through
``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.markers import parse_markers
from orchestrator.files import locked_folder, write_atomic
from orchestrator.memory.versions.store import Kind, RunStatus, Version, VersionStore, sha256_of

__all__ = ["VersionedFile", "text_problem"]


class VersionedFile:
    """A file whose every version is kept: an agent's ``MEMORY.md`` or a group's summary.

    Writers of one file, in any thread or process, take turns through an exclusive ``flock``
    on the folder that holds it (no lock file is left beside it). People editing the file by
    hand take no lock: :meth:`replace` re-reads the file under the lock and refuses to
    overwrite a change it did not start from.
    """

    def __init__(
        self, store: VersionStore, kind: Kind, owner: str, path: Path, count: Callable[[str], int]
    ) -> None:
        self.store = store
        self.kind: Kind = kind
        self.owner = owner
        self.path = path
        self.count = count

    def _locked(self) -> AbstractContextManager[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The folder, not a lock file: a lock file would stay in the user's workspace.
        return locked_folder(self.path.parent)

    def read(self) -> str:
        """The file's text; ``""`` when there is none."""
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def sync(self, now: datetime) -> Version | None:
        """Record the file as a version if it differs from the latest stored one.

        The first version is recorded with trigger ``"initial"``, later ones (a hand edit or a
        deletion found on disk) with ``"edited"``, so that nothing written by hand is lost.
        A missing or empty file with no versions yet records nothing.

        Returns:
            The version recorded, or None when the file matched the latest version.
        """
        with self._locked():
            text = self.read()
            latest = self.store.latest(self.kind, self.owner)
            if latest is None and not text.strip():
                return None
            if latest is not None and latest.sha256 == sha256_of(text):
                return None
            trigger = "initial" if latest is None else "edited"
            return self.store.add(
                self.kind,
                self.owner,
                text,
                trigger=trigger,
                created_at=now,
                tokens=self.count(text),
            )

    def replace(
        self,
        expected: str,
        text: str,
        *,
        trigger: str,
        now: datetime,
        source: dict[str, Any],
    ) -> Version | None:
        """Write ``text`` and store it as a version (and a written run), unless the file no
        longer reads ``expected``.

        Returns:
            The new version, or None when the file changed since it was read (a conflict).
        """
        with self._locked():
            if self.read() != expected:
                return None
            write_atomic(self.path, text)
            version = self.store.add(
                self.kind,
                self.owner,
                text,
                trigger=trigger,
                created_at=now,
                tokens=self.count(text),
                source=source,
            )
        self.note("written", trigger=trigger, now=now, source=source, version=version)
        return version

    def note(
        self,
        status: RunStatus,
        reason: str = "",
        *,
        trigger: str,
        now: datetime,
        source: dict[str, Any],
        version: Version | None = None,
    ) -> None:
        """Keep an attempt in the growth log; ``version`` is the one it wrote, if any."""
        self.store.record_run(
            self.kind,
            self.owner,
            status=status,
            trigger=trigger,
            created_at=now,
            reason=reason,
            version=version.version if version else None,
            tokens=version.tokens if version else 0,
            source=source,
        )


def text_problem(text: str, budget_tokens: int, count: Callable[[str], int]) -> str | None:
    """Why a generated text may not become a version, or None when it may.

    It must not be blank, must fit in ``budget_tokens`` and must carry no memory marker,
    valid or broken: a version is written only by its job, never through markers.
    """
    if not text.strip():
        return "the answer is empty"
    parsed = parse_markers(text)
    if parsed.markers or parsed.invalid:
        return f"the answer carries {len(parsed.markers) + len(parsed.invalid)} memory markers"
    tokens = count(text)
    if tokens > budget_tokens:
        return f"the answer has {tokens} tokens, over the budget of {budget_tokens}"
    return None
