"""The files of a knowledge source: text files by their suffix (Markdown, plain text, code,
configuration) and documents (PDF, DOCX: :mod:`orchestrator.memory.knowledge.documents`), never
hidden files or folders or the usual generated ones (``.git``, ``node_modules``,
``__pycache__``, ...), never a link out of the source's folder, at most :data:`MAX_FILES` of
them; a file whose path a locator cannot carry is set apart."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from orchestrator.memory.knowledge.documents import DOCUMENT_SUFFIXES

__all__ = ["MAX_FILES", "TooMany", "readable_suffix", "source_files"]

MAX_FILES = 50_000  # a source's readable files at most (a folder such as / is refused)
_TEXT_SUFFIXES = frozenset(
    [
        ".md",
        ".markdown",
        ".mdx",
        ".txt",
        ".rst",
        ".adoc",
        ".text",
        ".py",
        ".pyi",
        ".js",
        ".jsx",
        ".mjs",
        ".ts",
        ".tsx",
        ".go",
        ".rs",
        ".java",
        ".kt",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".rb",
        ".php",
        ".swift",
        ".scala",
        ".sh",
        ".bash",
        ".sql",
        ".toml",
        ".yaml",
        ".yml",
        ".json",
        ".ini",
        ".cfg",
        ".conf",
        ".csv",
        ".j2",
        ".jinja",
        ".proto",
        ".graphql",
        ".html",
        ".htm",
        *DOCUMENT_SUFFIXES,
    ]
)
_TEXT_NAMES = frozenset(
    [
        "readme",
        "license",
        "licence",
        "changelog",
        "contributing",
        "makefile",
        "dockerfile",
        "notice",
    ]
)
_SKIPPED_DIRS = frozenset(
    ["node_modules", "__pycache__", "venv", "site-packages", "dist", "build", "target"]
)


def readable_suffix(name: str) -> bool:
    """Whether a file called ``name`` is read as text (or as a document) by its name."""
    lowered = name.lower()
    suffix = os.path.splitext(lowered)[1]
    return suffix in _TEXT_SUFFIXES or (not suffix and lowered in _TEXT_NAMES)


class TooMany(Exception):
    """A source folder with more than :data:`MAX_FILES` readable files."""


def source_files(root: Path, kind: str, unfit: list[str]) -> Iterator[tuple[str, Path]]:
    """The readable files of a source, by their path relative to its root (with "/"); those a
    locator cannot name go to ``unfit``."""
    if kind == "file":
        if not root.is_file():
            raise FileNotFoundError(2, "no such file", str(root))
        yield root.name, root
        return
    if not root.is_dir():
        raise FileNotFoundError(2, "no such folder", str(root))
    real_root = root.resolve()
    count = 0
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        base = Path(folder)
        for name in names:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if not _plain(rel) and readable_suffix(name) and not name.startswith("."):
                unfit.append(rel)
            elif _readable(path, name, rel, real_root):
                count += 1
                if count > MAX_FILES:
                    raise TooMany
                yield rel, path


def _readable(path: Path, name: str, rel: str, real_root: Path) -> bool:
    """Whether a file found in a source's folder is indexed: not hidden, text by its name,
    its path fit for a locator, a regular file, and no link out of the folder."""
    if name.startswith(".") or not readable_suffix(name) or not _plain(rel):
        return False
    if path.is_symlink():
        try:
            path.resolve().relative_to(real_root)
        except (ValueError, OSError):
            return False  # a link out of the source's folder is never followed
    return path.is_file()


def _plain(rel: str) -> bool:
    """Whether a relative path can stand in a locator (no control characters, no "#" or
    "\\", which a locator reads otherwise)."""
    return not any(c in rel for c in "#\\") and all(ord(c) >= 32 and c != "\x7f" for c in rel)
