"""The one atomic write and the one folder lock (``orchestrator.files``)."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import pytest

from orchestrator.files import TextFiles, locked_folder, remove_stale_temps, write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_write_creates_the_folder_and_a_private_file(tmp_path: Path):
    """A new file gets its folder, its text and owner-only permissions by default."""
    path = tmp_path / "a" / "b" / "note.md"
    write_atomic(path, "first\n")
    assert path.read_text(encoding="utf-8") == "first\n"
    assert _mode(path) == 0o600
    assert _temps(path.parent) == []


def test_write_replaces_the_text_with_the_mode_asked_for(tmp_path: Path):
    """A rewrite replaces the whole text; ``mode`` sets the new file's permissions."""
    path = tmp_path / "log.md"
    write_atomic(path, "old text that is longer\n")
    write_atomic(path, "new\n", mode=0o644)
    assert path.read_text(encoding="utf-8") == "new\n"
    assert _mode(path) == 0o644


def test_failed_rename_keeps_the_old_file_and_no_temp(tmp_path: Path, monkeypatch):
    """When the rename fails, the old file is intact and the temporary file is gone."""
    path = tmp_path / "kept.md"
    write_atomic(path, "kept\n")

    def broken_replace(src: str, dst: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr("orchestrator.files.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_atomic(path, "lost\n")
    assert path.read_text(encoding="utf-8") == "kept\n"
    assert _temps(tmp_path) == []


def test_stale_temps_of_one_file_are_removed(tmp_path: Path):
    """Only the temporary files of the named file go; others' stay."""
    path = tmp_path / "log.md"
    (tmp_path / ".log.md.abc123.tmp").write_text("half", encoding="utf-8")
    (tmp_path / ".other.md.abc123.tmp").write_text("half", encoding="utf-8")
    remove_stale_temps(path)
    assert _temps(tmp_path) == [".other.md.abc123.tmp"]


def test_folder_lock_excludes_other_holders(tmp_path: Path):
    """While the lock is held, another open of the folder cannot take it; afterwards it can."""

    def try_lock() -> bool:
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True

    with locked_folder(tmp_path):
        assert not try_lock()
    assert try_lock()
    assert list(tmp_path.iterdir()) == []  # no lock file is left behind


def test_text_files_are_read_again_only_when_they_change(tmp_path: Path):
    """A file read through TextFiles is read again after an append in place or an atomic
    replace, and reads as "" once it is gone."""
    files = TextFiles(keep=2)
    log = tmp_path / "2026-11-26.md"
    assert files.read(log) == ""
    log.write_text("- one\n", encoding="utf-8")
    assert files.read(log) == "- one\n"
    with log.open("a", encoding="utf-8") as out:
        out.write("- two\n")
    assert files.read(log) == "- one\n- two\n"
    write_atomic(log, "- three\n")
    assert files.read(log) == "- three\n"
    write_atomic(log, "- four!\n")
    assert files.read(log) == "- four!\n"
    log.unlink()
    assert files.read(log) == ""
    for name in ("a", "b", "c", "a"):  # past `keep`: the first is read anew
        (tmp_path / name).write_text(name, encoding="utf-8")
        assert files.read(tmp_path / name) == name
