"""Messages as HTML that is safe to put in a page: Markdown rendered with raw HTML escaped.

Nothing in a message (a person's or an agent's) can run script or load a remote resource:

- raw HTML in the text is shown as text (the renderer escapes it);
- links keep only ``http``, ``https`` and ``mailto`` targets, and open without a referrer;
- images are shown as links to their address, never loaded;
- the page's Content-Security-Policy forbids inline and remote scripts besides.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["markdown_html"]

_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def _link_open(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    href = str(token.attrGet("href") or "")
    if not href.lower().startswith(_SAFE_SCHEMES):
        token.attrSet("href", "#")
    token.attrSet("rel", "noopener noreferrer nofollow")
    token.attrSet("target", "_blank")
    return str(renderer.renderToken(tokens, idx, options, env))


def _image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """An image as a link to it (or its text alone when its address is not safe)."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    label = _escape(renderer.renderInlineAsText(token.children or [], options, env) or src)
    if not src.lower().startswith(_SAFE_SCHEMES):
        return f"[image: {label}]"
    return (
        f'<a href="{_escape(src)}" rel="noopener noreferrer nofollow" target="_blank">'
        f"[image: {label}]</a>"
    )


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#x27;")
    )


@lru_cache(maxsize=1)
def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table").enable("strikethrough")
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("image", _image)
    return md


@lru_cache(maxsize=4096)
def markdown_html(text: str) -> str:
    """``text`` (Markdown) as HTML safe to insert into a page (remembered: the newest pages of
    busy rooms are asked for again and again)."""
    return str(_renderer().render(text))
