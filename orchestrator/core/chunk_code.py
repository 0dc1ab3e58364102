"""Where source code splits: Python's definitions by its own parser, other languages' by patterns.

The units found here are cut to size by :mod:`orchestrator.core.chunking`. Lines are counted from
0 here and a unit's ``end`` is its last line; together the units of a file cover it in order,
without overlapping.

- **Python**: each top-level ``def``, ``async def`` and ``class`` is a definition, with its
  decorators and the comment block directly above it. A class too long to be one chunk is split
  into its members: its header (the lines up to its first method, docstring and attributes
  included) and each method, nested class or run of statements between them, under the heading
  ``("class X", "def m")``. The code between definitions (imports, constants) is a ``lines`` unit.
  A file that does not parse gives no units (``None``); the caller cuts it into line windows.
- **Other languages**: a definition starts at a line that begins, at its first column, with a
  declaration (``function``, ``class``, ``struct``, ``impl``, ``fn``, ``func``, ``interface``,
  ``type``, ...; ``const f = (...) =>`` in JavaScript; ``int main(void)`` in C; ``name() {`` in a
  shell script), with the comment or attribute lines directly above it, and runs to the line
  before the next one. Its heading is its declaration line, up to 80 characters. Indented
  declarations (methods) are not split out.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CODE_SUFFIXES", "PYTHON_SUFFIXES", "Unit", "code_units", "python_units"]

PYTHON_SUFFIXES = frozenset({".py", ".pyi"})

_JAVASCRIPT = frozenset({".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx"})
_C = frozenset({".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp"})
_SHELL = frozenset({".sh", ".bash"})
_HASH_COMMENTS = frozenset({".sh", ".bash", ".rb"})
_OTHER = frozenset({".go", ".rs", ".java", ".kt", ".cs", ".rb", ".php", ".swift", ".scala"})
CODE_SUFFIXES = _JAVASCRIPT | _C | _SHELL | _OTHER

_HEADING_CHARS = 80
_PREFIX_CHARS = 300  # how much of a line the patterns read: a declaration starts early

_MODIFIERS = (
    r"(?:(?:export|default|pub(?:\([\w: ]*\))?|public|private|protected|internal|static|abstract"
    r"|final|sealed|open|override|async|unsafe|extern(?: \"C\")?|inline|virtual|data|suspend"
    r"|partial|declare|const|case|typedef)\s+)*"
)
_KEYWORD_DEF = re.compile(
    _MODIFIERS + r"(?:function\*?|class|struct|enum|union|interface|trait|impl|fn|func|fun|def"
    r"|mod|module|object|type|namespace|protocol|extension|record|macro_rules!)(?:[\s(<]|$)"
)
_ARROW_DEF = re.compile(
    r"(?:export\s+)?(?:default\s+)?(?:const|let|var)\s+[\w$]+\s*(?::[^=]*)?=\s*(?:async\s+)?"
    r"(?:function\b|\([^()]*\)\s*(?::[^=]*)?=>|[\w$]+\s*=>)"
)
_C_FUNCTION = re.compile(
    r"(?!(?:if|else|for|while|switch|return|do|case|goto|using)\b)"
    r"[A-Za-z_][\w:<>,*& \t~]*?[\s*&]~?[A-Za-z_][\w:]*\s*\("
)
_SHELL_FUNCTION = re.compile(r"(?:function\s+[\w.:-]+|[\w.:-]+\s*\(\s*\))")
_LEADS = ("//", "/*", "*", "#[", "@")

Fits = Callable[[int, int], bool]
"""Whether lines ``start..end`` (0-based, inclusive) make a chunk no longer than the limit."""


@dataclass(frozen=True, slots=True)
class Unit:
    """A stretch of lines (0-based, inclusive) that belongs together, before it is cut to size."""

    start: int
    end: int
    heading: tuple[str, ...]
    kind: str


def python_units(lines: Sequence[str], fits: Fits) -> list[Unit] | None:
    """A Python file's definitions and the code between them; ``None`` if it does not parse."""
    try:
        # The parser warns about things such as invalid escapes; they do not matter here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    units: list[Unit] = []
    _members(lines, tree.body, (0, len(lines) - 1), (), fits, units)
    return units


_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _members(
    lines: Sequence[str],
    body: Sequence[ast.stmt],
    span: tuple[int, int],
    heading: tuple[str, ...],
    fits: Fits,
    out: list[Unit],
) -> None:
    """The units of one body: its definitions, and the statements between them."""
    cursor, end = span
    gap_kind = "definition" if heading else "lines"
    for node in body:
        if not isinstance(node, _Definition):
            continue
        first = max(min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1, cursor)
        while first > cursor and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        last = min((node.end_lineno or node.lineno) - 1, end)
        if first > last:
            continue
        if cursor < first:
            out.append(Unit(cursor, first - 1, heading, gap_kind))
        path = (*heading, _title(node))
        if (
            isinstance(node, ast.ClassDef)
            and not fits(first, last)
            and any(isinstance(member, _Definition) for member in node.body)
        ):
            _members(lines, node.body, (first, last), path, fits, out)
        else:
            out.append(Unit(first, last, path, "definition"))
        cursor = last + 1
    if cursor <= end:
        out.append(Unit(cursor, end, heading, gap_kind))


def _title(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}"
    if isinstance(node, ast.AsyncFunctionDef):
        return f"async def {node.name}"
    return f"def {node.name}"


def code_units(lines: Sequence[str], suffix: str) -> list[Unit]:
    """A source file's definitions, found by the patterns of its language (its ``suffix``)."""
    starts = [i for i, line in enumerate(lines) if _declares(line[:_PREFIX_CHARS], suffix)]
    leads = (*_LEADS, "#") if suffix in _HASH_COMMENTS else _LEADS
    firsts: list[int] = []
    floor = 0
    for start in starts:
        first = start
        while first > floor and lines[first - 1].lstrip().startswith(leads):
            first -= 1
        firsts.append(first)
        floor = start + 1
    units: list[Unit] = []
    if not firsts or firsts[0] > 0:
        units.append(Unit(0, (firsts or [len(lines)])[0] - 1, (), "lines"))
    for k, (first, start) in enumerate(zip(firsts, starts, strict=True)):
        last = firsts[k + 1] - 1 if k + 1 < len(firsts) else len(lines) - 1
        units.append(Unit(first, last, (_declaration(lines[start]),), "definition"))
    return units


def _declares(line: str, suffix: str) -> bool:
    """Whether a line starts a definition in the language of ``suffix``."""
    if _KEYWORD_DEF.match(line):
        return True
    if suffix in _JAVASCRIPT:
        return _ARROW_DEF.match(line) is not None
    if suffix in _C:
        return _C_FUNCTION.match(line) is not None and not line.rstrip().endswith(";")
    if suffix in _SHELL:
        return _SHELL_FUNCTION.match(line) is not None
    return False


def _declaration(line: str) -> str:
    """A definition's heading: its declaration line, without an opening brace, shortened."""
    text = line.strip().removesuffix("{").rstrip()
    return text if len(text) <= _HEADING_CHARS else text[: _HEADING_CHARS - 3] + "..."
