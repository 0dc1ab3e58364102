"""Find the memory markers an agent leaves in its reply, and make marker-shaped text inert.

An agent saves a memory by writing a hidden marker in its reply::

    <!--SAVE_MEMORY:{"type": "decision", "content": "We use JWT", "confidence": 0.9}-->
    <!--SAVE_TO_PERSONAL:{"content": "Ask for the expected load first", "type": "lesson"}-->

The grammar is ``<!--``, the name (``SAVE_MEMORY`` or ``SAVE_TO_PERSONAL``), ``:``, one JSON
value and ``-->``, with any whitespace, line breaks included, between those tokens. The name is
read loosely, because whatever a model could take for a marker must be hidden from people: any
letter case, whitespace or invisible characters (zero-width spaces, bidirectional controls)
between its letters, and ``_``, ``-`` or nothing between its words (``<!--save_memory:``,
``<!--Save-Memory:``, ``<!--SAVE_\nMEMORY:``). The JSON is read with a real decoder, so a string
inside it may contain ``-->``.

:func:`parse_markers` is pure and never raises. It returns the reply as people should see it
(every marker removed, valid or not, an unterminated one with the rest of the text), the
markers whose payload is a JSON object, and the broken ones with the reason. No marker's text
is kept beyond that: each carries its length and a short hash of its text, so it can be told
apart in the reply's metadata without being repeated there. Schema checks on the payloads
belong to the memory gate.

:func:`neutralise` is applied to human messages and history before they reach a model, so that
quoted text can never plant a marker: it rewrites the ``<`` of a ``<!--`` that opens a marker
(or starts to: ``<!--save``, in any case and spacing) as ``\u2039`` (U+2039, a single angle
quotation mark). The parser does not match it, a model does not take it for the syntax it is
asked to write, and people reading a reply, a summary or a log that quotes it read it as
written (an HTML entity such as ``&lt;`` would show as such in the console and the terminal).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.core.quick_init import quick_init

__all__ = [
    "MARKER_RE",
    "InvalidMarker",
    "Marker",
    "MarkerKind",
    "ParsedReply",
    "fingerprint",
    "neutralise",
    "parse_markers",
]

MarkerKind = Literal["memory", "personal"]

# Whitespace and characters that show nothing: allowed between the letters of a marker's name,
# and between its words together with '_' and '-'.
_INVISIBLE = "\\s\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_GAP = f"[{_INVISIBLE}]*"
_JOIN = f"[{_INVISIBLE}_-]*"


def _spaced(word: str) -> str:
    return _GAP.join(word)


_SAVE = _spaced("SAVE") + _JOIN
_NAME = (
    f"(?:(?P<memory>{_spaced('MEMORY')})|(?P<personal>{_spaced('TO')}{_JOIN}{_spaced('PERSONAL')}))"
)

MARKER_RE = re.compile(f"<!--{_GAP}{_SAVE}{_NAME}\\s*:(.*?)-->", re.DOTALL | re.IGNORECASE)
"""The shape of a marker, for documentation and checks; the parser reads the JSON itself."""

# Anything that opens a marker, even without the ':' or the '-->', is removed from the reply.
_START_RE = re.compile(f"<!--{_GAP}{_SAVE}{_NAME}", re.IGNORECASE)
_COLON_RE = re.compile(r"\s*:\s*")
_CLOSE_RE = re.compile(r"\s*-->")
# Wider than _START_RE (a name begun is enough), so neutralised text never parses as a marker.
_NEUTRALISE_RE = re.compile(f"<(?=!--{_GAP}{_spaced('SAVE')})", re.IGNORECASE)
_QUOTED = "\u2039"  # what neutralise writes for that '<': a single angle quotation mark
_ASSEMBLED = "formed only by removing another marker"
_DIGEST_HEX = 12


def fingerprint(raw: str) -> str:
    """A short hash that tells a marker's text apart without repeating it: the first 12 hex
    digits of the SHA-256 of its UTF-8 bytes."""
    digest = hashlib.sha256(raw.encode("utf-8", errors="surrogatepass")).hexdigest()
    return digest[:_DIGEST_HEX]


@dataclass(frozen=True, slots=True, kw_only=True)
class Marker:
    """A well-formed marker: ``kind`` is "memory" for SAVE_MEMORY, "personal" otherwise.

    ``length`` (characters) and ``digest`` (:func:`fingerprint`) describe the marker's text as
    written; they are empty for a marker built by hand and play no part in equality.
    """

    kind: MarkerKind
    payload: dict[str, Any]
    length: int = field(default=0, compare=False)
    digest: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidMarker:
    """A marker that could not be read: why, and its text's length and :func:`fingerprint`."""

    kind: MarkerKind
    reason: str
    length: int
    digest: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedReply:
    """A reply split into what people see and the markers it carried."""

    visible: str
    markers: tuple[Marker, ...] = ()
    invalid: tuple[InvalidMarker, ...] = ()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_markers(text: str) -> ParsedReply:
    """Split a model reply into visible text and memory markers.

    Every marker is removed from the visible text, valid or not, and so is an unterminated
    ``<!--SAVE_...`` tail. Where markers stood, the surrounding whitespace is tidied: at most
    one blank line, or one space inside a line. If removing markers joins fragments into a new
    marker, that one is removed too and reported as invalid.

    Args:
        text: The reply as the model wrote it.

    Returns:
        The visible text (stripped), the valid markers in order, and the invalid ones.
    """
    visible, found = _scan(text)
    markers = [item for item in found if isinstance(item, Marker)]
    invalid = [item for item in found if isinstance(item, InvalidMarker)]
    while _START_RE.search(visible):
        visible, assembled = _scan(visible)
        for item in assembled:
            reason = _ASSEMBLED if isinstance(item, Marker) else f"{_ASSEMBLED}; {item.reason}"
            invalid.append(
                InvalidMarker(kind=item.kind, reason=reason, length=item.length, digest=item.digest)
            )
    return ParsedReply(visible=visible.strip(), markers=tuple(markers), invalid=tuple(invalid))


def neutralise(text: str) -> str:
    """Make marker-shaped text inert, so quoting it can never save a memory.

    The ``<`` of every ``<!--`` that opens a marker, or the start of one, becomes ``\u2039``:
    ``<!--SAVE_MEMORY:{...}-->`` reads ``\u2039!--SAVE_MEMORY:{...}-->``, and so does
    ``<!-- save_memory:{...}-->``. All other text is returned unchanged, and ``neutralise`` is
    idempotent.

    Args:
        text: A human message or a history line about to go into a prompt.

    Returns:
        The text with no marker left for :func:`parse_markers` to find.
    """
    return _NEUTRALISE_RE.sub(_QUOTED, text)


def _scan(text: str) -> tuple[str, list[Marker | InvalidMarker]]:
    """One pass: remove every marker from left to right; return the rest and what was found."""
    found: list[Marker | InvalidMarker] = []
    segments: list[str] = []
    pos = 0
    while (start := _START_RE.search(text, pos)) is not None:
        segments.append(text[pos : start.start()])
        pos, item = _read_marker(text, start)
        found.append(item)
    if not found:
        return text, found
    segments.append(text[pos:])
    return _join(segments), found


def _join(segments: list[str]) -> str:
    """Join the text around removed markers, tidying the whitespace at each join.

    The whitespace on both sides of a run of removed markers becomes at most one blank line
    if it held line breaks, one space if it held other whitespace, and nothing otherwise.
    """
    first = segments[0].rstrip()
    parts = [first]
    gap = segments[0][len(first) :]
    for segment in segments[1:]:
        body = segment.lstrip()
        gap += segment[: len(segment) - len(body)]
        if not body:
            continue
        kept = body.rstrip()
        parts.append(_gap_text(gap))
        parts.append(kept)
        gap = body[len(kept) :]
    parts.append(_gap_text(gap))
    return "".join(parts)


def _read_marker(text: str, start: re.Match[str]) -> tuple[int, Marker | InvalidMarker]:
    """Read the marker opened at ``start``; return where it ends and what it holds."""
    kind: MarkerKind = "memory" if start.group("memory") is not None else "personal"
    colon = _COLON_RE.match(text, start.end())
    if colon is None:
        return _invalid(text, start.start(), start.end(), kind, "no ':' after the name")
    try:
        payload, json_end = _DECODER.raw_decode(text, colon.end())
    except json.JSONDecodeError as exc:
        return _invalid(text, start.start(), colon.end(), kind, f"not JSON: {exc.msg}")
    except (ValueError, RecursionError) as exc:
        return _invalid(text, start.start(), colon.end(), kind, f"not JSON: {exc}")
    close = _CLOSE_RE.match(text, json_end)
    if close is None:
        return _invalid(text, start.start(), json_end, kind, "text between the JSON and '-->'")
    raw = text[start.start() : close.end()]
    if not isinstance(payload, dict):
        return close.end(), _described(kind, raw, "payload is not an object")
    return close.end(), Marker(kind=kind, payload=payload, length=len(raw), digest=fingerprint(raw))


def _invalid(
    text: str, begin: int, search_from: int, kind: MarkerKind, reason: str
) -> tuple[int, InvalidMarker]:
    """A broken marker ends at the next ``-->``, or takes the rest of the text if none."""
    close = text.find("-->", search_from)
    if close == -1:
        end, reason = len(text), f"unterminated (no '-->'); {reason}"
    else:
        end = close + 3
    return end, _described(kind, text[begin:end], reason)


def _described(kind: MarkerKind, raw: str, reason: str) -> InvalidMarker:
    return InvalidMarker(kind=kind, reason=reason, length=len(raw), digest=fingerprint(raw))


def _gap_text(gap: str) -> str:
    """What stands where markers were removed, given the whitespace around them."""
    newlines = gap.count("\n")
    if newlines:
        return "\n" * min(newlines, 2)
    return " " if gap else ""
