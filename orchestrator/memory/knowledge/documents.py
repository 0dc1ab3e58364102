"""PDF and DOCX files as text for knowledge, with the optional ``[documents]`` extra
(``pip install 'agent-arena[documents]'``: pdfminer.six for PDFs, mammoth for DOCX).

A PDF becomes the text of each of its pages (pdfminer's layout analysis: a blank line between
its blocks of text), so a passage's locator names its page and the lines of that page's text
(``report.pdf#p3:L4-20@digest``). A DOCX becomes one text: its headings Markdown headings
(``#`` for Heading 1), its paragraphs separated by blank lines, list items as ``- `` lines and
table cells on lines of their own, so it is split at its headings as a Markdown document is.

The libraries are imported only in a child process (``python -m`` this module, the file's
bytes on its standard input): the daemon runs without them, and a hostile file cannot hang or
exhaust it: the child is killed after :data:`CONVERT_S` seconds and may use at most
:data:`CONVERT_MEMORY_BYTES` of memory (and a little more than that time of CPU, should the
daemon be gone). A file that cannot be converted (broken, encrypted, too slow, no text in it,
the extra missing) raises :class:`Unreadable` with why, in one line.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.html_text import html_text
from orchestrator.core.models import assume_utc

__all__ = [
    "CONVERT_MEMORY_BYTES",
    "CONVERT_S",
    "DOCUMENT_SUFFIXES",
    "MAX_DOCUMENT_BYTES",
    "PAGED_SUFFIXES",
    "RETRY_S",
    "Unreadable",
    "converted",
    "is_document",
    "missing_extra",
    "retry_installed",
    "retry_passing",
]

DOCUMENT_SUFFIXES = (".pdf", ".docx")
PAGED_SUFFIXES = (".pdf",)
"""The documents whose locators name a page."""
MAX_DOCUMENT_BYTES = 20_000_000
"""The largest PDF or DOCX read (other files: the indexer's ``MAX_FILE_BYTES``)."""
CONVERT_S = 60.0
CONVERT_MEMORY_BYTES = 2 * 1024**3
_MODULES = {".pdf": "pdfminer", ".docx": "mammoth"}
_NAMES = {".pdf": "PDF", ".docx": "DOCX"}
_PROBLEM_CHARS = 300


class Unreadable(Exception):
    """A document that gave no text: ``problem`` says why, in one line."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _suffix(name: str) -> str:
    return os.path.splitext(name.lower())[1]


def is_document(name: str) -> bool:
    """Whether a file called ``name`` is a PDF or a DOCX, read through the extra."""
    return _suffix(name) in DOCUMENT_SUFFIXES


def missing_extra(name: str) -> str | None:
    """Why document ``name`` cannot be read here when the ``[documents]`` extra is missing,
    else None."""
    suffix = _suffix(name)
    module = _MODULES.get(suffix)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return f"{_NAMES[suffix]} needs the [documents] extra: pip install 'agent-arena[documents]'"


RETRY_S = 600.0  # a conversion that failed for a passing reason is tried again this much later
_PASSING = ("its conversion took longer than", "cannot start its conversion", "was stopped")


def retry_passing(problem: str | None, indexed_at: datetime | None, now: datetime) -> bool:
    """Whether a document whose conversion failed for a reason that may pass (a time limit on
    a busy machine, a process that could not start or was stopped) is due to be tried again:
    :data:`RETRY_S` after the failure, so that a file that always fails costs little."""
    if not problem or indexed_at is None or not any(p in problem for p in _PASSING):
        return False
    return (now - assume_utc(indexed_at)).total_seconds() >= RETRY_S


def retry_installed(name: str, problem: str | None) -> bool:
    """Whether document ``name``, recorded with ``problem``, was unread for want of the extra
    that is installed now (so it is read again though it did not change)."""
    return bool(problem) and "[documents] extra" in str(problem) and missing_extra(name) is None


def converted(name: str, data: bytes, *, timeout: float | None = None) -> list[str]:
    """The text of document ``name`` (its bytes ``data``): a PDF's page by page, a DOCX's as
    one text.

    Raises:
        Unreadable: the extra is missing, the file is broken, encrypted or has no text, or its
            conversion took longer than ``timeout`` seconds (:data:`CONVERT_S` by default) or
            failed otherwise.
    """
    timeout = CONVERT_S if timeout is None else timeout
    missing = missing_extra(name)
    if missing is not None:
        raise Unreadable(missing)
    suffix = _suffix(name)
    if suffix not in DOCUMENT_SUFFIXES:
        raise Unreadable(f"not a document this index converts ({suffix or 'no suffix'})")
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, suffix],
            input=data,
            capture_output=True,
            timeout=timeout,
            env=_child_env(),
            check=False,
            start_new_session=True,  # a Ctrl-C meant for the daemon is not a failed conversion
        )
    except subprocess.TimeoutExpired:
        raise Unreadable(f"its conversion took longer than {timeout:g} s") from None
    except OSError as exc:
        raise Unreadable(f"cannot start its conversion: {exc.strerror or exc}") from None
    answer = _answer(done.stdout)
    if answer is None:
        raise Unreadable(_crashed(done))
    if "problem" in answer:
        raise Unreadable(" ".join(str(answer["problem"]).split())[:_PROBLEM_CHARS])
    pages = [str(page) for page in answer.get("pages", [])]
    if not any(page.strip() for page in pages):
        scan = " (a scan? text in images is not read)" if suffix == ".pdf" else ""
        raise Unreadable(f"no text in it{scan}")
    return pages


def _answer(out: bytes) -> dict[str, Any] | None:
    """The child's answer, if it printed one."""
    try:
        answer = json.loads(out)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _crashed(done: subprocess.CompletedProcess[bytes]) -> str:
    """Why a conversion ended without an answer, from its exit and its last error line."""
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    last = lines[-1][:_PROBLEM_CHARS] if lines else ""
    if done.returncode < 0:
        return f"its conversion was stopped (signal {-done.returncode})" + (
            f": {last}" if last else ""
        )
    return f"its conversion failed: {last or f'exit {done.returncode}'}"


def _child_env() -> dict[str, str]:
    """The environment of the converting process: this one's, with this package importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


# --- in the child process ---------------------------------------------------------------------


def _pdf_pages(data: bytes) -> list[str]:
    from pdfminer.high_level import extract_text

    text = extract_text(io.BytesIO(data))
    pages = text.split("\f")
    if len(pages) > 1 and not pages[-1].strip():
        pages.pop()  # pdfminer ends every page with a form feed
    return pages


_BLOCK_END = re.compile(r"</(?:p|h[1-6]|table|ul|ol)>", re.I)
_LINE_END = re.compile(r"</(?:li|tr|td|th)>", re.I)
_ITEM = re.compile(r"<li\b[^>]*>", re.I)


def _docx_text(data: bytes) -> str:
    import mammoth

    markup = str(mammoth.convert_to_html(io.BytesIO(data)).value)
    markup = _ITEM.sub("- ", markup)
    markup = _LINE_END.sub("\n", _BLOCK_END.sub("\n\n", markup))
    return re.sub(r"\n{3,}", "\n\n", html_text(markup)).strip("\n") + "\n"


def _limit_resources() -> None:
    """Memory, and CPU time: a child whose parent was killed still ends."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CONVERT_MEMORY_BYTES, CONVERT_MEMORY_BYTES))
        cpu = int(CONVERT_S) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    except (ImportError, ValueError, OSError):
        pass  # the parent's time limit still holds


def _child(suffix: str, data: bytes) -> dict[str, Any]:
    """The answer the child prints: ``{"pages": [...]}`` or ``{"problem": "..."}``."""
    kind = _NAMES.get(suffix, suffix)
    try:
        pages = _pdf_pages(data) if suffix == ".pdf" else [_docx_text(data)]
    except ImportError:
        return {"problem": missing_extra("x" + suffix) or f"{kind} needs the [documents] extra"}
    except MemoryError:
        return {"problem": f"its conversion needed more than {CONVERT_MEMORY_BYTES >> 30} GB"}
    except Exception as exc:  # any failure of a library on a hostile file is a problem
        if re.search("password|encrypt", type(exc).__name__, re.I):
            return {"problem": f"an encrypted {kind}: it cannot be read without its password"}
        reason = " ".join(str(exc).split())[:_PROBLEM_CHARS]
        named = type(exc).__name__ + (f": {reason}" if reason else "")
        return {"problem": f"not a readable {kind} ({named})"}
    return {"pages": pages}


def main() -> None:
    """Convert the document on standard input (its suffix the one argument); print JSON."""
    _limit_resources()
    suffix = sys.argv[1] if len(sys.argv) > 1 else ""
    out, sys.stdout = sys.stdout, sys.stderr  # what a library prints stays out of the answer
    answer = _child(suffix, sys.stdin.buffer.read())
    out.write(json.dumps(answer))


if __name__ == "__main__":
    main()
