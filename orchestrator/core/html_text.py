"""HTML as text for knowledge, line for line: tags, comments, scripts and styles removed,
entities decoded, and each line of the result the same line of the file, so a locator's lines
are the file's lines. Headings (``<h1>`` to ``<h6>``) become Markdown headings, so a page is
split at them as a Markdown document is."""

from __future__ import annotations

import html
import re

__all__ = ["HTML_SUFFIXES", "html_text"]

HTML_SUFFIXES = (".html", ".htm")

_HIDDEN_RE = re.compile(r"<!--.*?-->|<(script|style|template)\b[^>]*>.*?</\1\s*>", re.I | re.S)
_HEADING_RE = re.compile(r"<h([1-6])\b[^>]*>", re.I)
_TAG_RE = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)?[^>]*>", re.S)
# Tags that end a run of text (a space stands for them); the others sit inside words' runs.
_BLOCK = frozenset(
    [
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "tr",
        "td",
        "th",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "nav",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "title",
        "pre",
        "blockquote",
        "dd",
        "dt",
        "dl",
        "hr",
    ]
)
_SPACES_RE = re.compile(r"[ \t\f\v\u00a0]+")


def _keep_lines(match: re.Match[str]) -> str:
    """What replaces removed markup: its line breaks only."""
    return "\n" * match.group(0).count("\n")


def _tag(match: re.Match[str]) -> str:
    """A tag's replacement: its line breaks, else a space for a block tag, else nothing."""
    kept = _keep_lines(match)
    if kept:
        return kept
    name = (match.group(2) or "").lower()
    return " " if name in _BLOCK else ""


def html_text(source: str) -> str:
    """The text of an HTML document with its line structure kept (see the module)."""
    text = _HIDDEN_RE.sub(_keep_lines, source)
    text = _HEADING_RE.sub(lambda m: _keep_lines(m) + "#" * int(m.group(1)) + " ", text)
    text = _TAG_RE.sub(_tag, text)
    lines = [_SPACES_RE.sub(" ", html.unescape(line)).strip() for line in text.split("\n")]
    return "\n".join(lines)
