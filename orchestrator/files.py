"""Writing user data safely: one atomic write and one folder lock for the whole package.

:func:`write_atomic` writes a temporary file in the same folder, fsyncs it, renames it over
the target and fsyncs the folder: a reader sees the old file or the new one, never half of
one, and a crash leaves one of the two. :func:`locked_folder` lets writers of one folder take
turns, across threads and processes, with an exclusive ``flock`` on the folder itself (a lock
file would stay behind in the user's workspace; removing one races with its next user).
Everything here blocks: call it through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TextFiles", "locked_folder", "remove_stale_temps", "write_atomic"]


class TextFiles:
    """Small text files read often and changed seldom (an agent's ``MEMORY.md`` and daily
    logs, a group's summary, every turn): each read is one ``stat``; the file is read again only
    when its inode, size or modification time changed (an atomic replace changes the inode).
    At most ``keep`` files are remembered, the least recently read forgotten first. A path
    given as a string is read as given (the quickest: a path object is made a string first)."""

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self._known: OrderedDict[str, tuple[tuple[int, int, int], str]] = OrderedDict()

    def read(self, path: Path | str) -> str:
        """The file's text (UTF-8); ``""`` when there is none."""
        name = path if isinstance(path, str) else os.fspath(path)
        try:
            info = os.stat(name)
        except FileNotFoundError:
            self._known.pop(name, None)
            return ""
        seen = (info.st_ino, info.st_size, info.st_mtime_ns)
        known = self._known.get(name)
        if known is not None and known[0] == seen:
            self._known.move_to_end(name)
            return known[1]
        try:
            with open(name, encoding="utf-8") as file:
                text = file.read()
        except FileNotFoundError:
            return ""
        self._known[name] = (seen, text)
        self._known.move_to_end(name)
        while len(self._known) > self.keep:
            self._known.popitem(last=False)
        return text


def write_atomic(path: Path, text: str | bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never half.

    Creates the folder if needed; the folder is fsynced so the rename survives a crash.

    Args:
        path: The file to replace (or create).
        text: Its new content, written as UTF-8 (bytes: as they are).
        mode: The new file's permission bits; None leaves them private to the owner (0o600).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        data = text.encode("utf-8") if isinstance(text, str) else text
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def remove_stale_temps(path: Path) -> None:
    """Remove the temporary files a killed :func:`write_atomic` of ``path`` left behind.

    Call it only while holding :func:`locked_folder` of the file's folder, which every
    writer of the file takes, so that no live writer owns one.
    """
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


@contextlib.contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder``, shared by every thread and process.

    The folder must exist.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
