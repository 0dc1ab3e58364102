"""What the ``arena`` commands write to the terminal: text from the stores, made safe to show.

Messages, memories, logs and job outcomes may hold characters a terminal acts on instead of
showing: NUL, ESC (which starts colour and cursor sequences), other C0 and C1 controls, and the
bidirectional controls that reorder what is displayed (U+202E shows text backwards).
:func:`printable` shows each of them as an escape (``\\x00``, ``\\x1b``, ``\\u202e``) and keeps
tab and newline. Everything printed through :data:`out` and :data:`err` passes through it, and so
does every view that writes with ``click.echo``; :func:`json_text` escapes the same characters
inside JSON strings.

The consoles read no markup: a ``[group]`` or ``[bold]`` in a message is printed as written.
A view that styles text passes ``markup=True`` and puts what came from outside through
:func:`rich.markup.escape`, or uses ``style=``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from rich.console import Console
from rich.style import Style
from rich.text import Text

__all__ = ["err", "fail", "json_text", "out", "printable", "renew"]

_KEPT = {"\t", "\n"}
# Unicode's Bidi_Control characters: embeddings, overrides, isolates and the implicit marks.
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS = [c for c in [*range(0x20), *range(0x7F, 0xA0)] if chr(c) not in _KEPT]
_SURROGATES = range(0xD800, 0xE000)  # only from undecodable input; a terminal cannot show them
_FOR_TERMINAL = {
    **{c: f"\\x{c:02x}" for c in _CONTROLS},
    **{c: f"\\u{c:04x}" for c in (*_BIDI, *_SURROGATES)},
}
# json.dumps escapes C0 itself; the rest must be escaped the JSON way inside strings.
_FOR_JSON = {c: f"\\u{c:04x}" for c in (*_CONTROLS, *_BIDI, *_SURROGATES) if c >= 0x7F}


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline, and every bidirectional
    control, written as a visible escape: ``"a\\x00b\\u202e"`` for ``"a<NUL>b<RLO>"``."""
    return text.translate(_FOR_TERMINAL)


def json_text(data: Any, *, indent: int | None = None) -> str:
    """``data`` as JSON safe to print: non-ASCII stays readable, but controls and
    bidirectional controls are ``\\uXXXX`` escapes (a valid JSON document)."""
    return json.dumps(data, ensure_ascii=False, indent=indent).translate(_FOR_JSON)


class _SafeConsole(Console):
    """A console that shows every string it prints through :func:`printable`, as wide as the
    terminal (or ``COLUMNS``) is when it prints, not when this module was imported."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Console reads COLUMNS and LINES once, here; without these its size is read anew.
        self._width = None
        self._height = None

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)


def _console(*, stderr: bool) -> _SafeConsole:
    return _SafeConsole(stderr=stderr, highlight=False, soft_wrap=True, emoji=False, markup=False)


out = _console(stderr=False)
err = _console(stderr=True)


def renew() -> None:
    """Detect the terminal again (colours, ``NO_COLOR``, ``TERM``…) for :data:`out` and
    :data:`err`: for a process that took on another's standard streams and environment after
    this module was imported (the warm command server's)."""
    for console, stderr in ((out, False), (err, True)):
        _SafeConsole.__init__(
            console, stderr=stderr, highlight=False, soft_wrap=True, emoji=False, markup=False
        )


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``arena: <message>`` on stderr, as written, and exit with ``code``."""
    err.print(Text.assemble(("arena:", Style(color="red", bold=True)), " ", printable(message)))
    sys.exit(code)
