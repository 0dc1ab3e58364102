"""BERT's uncased WordPiece tokeniser, as all-MiniLM-L6-v2 reads text.

The same steps as the reference tokeniser (``BertTokenizer`` with ``do_lower_case``): control
characters dropped and white space made plain, CJK ideographs set apart, lower case, accents
taken off, words split at punctuation, then each word cut greedily into the longest pieces the
vocabulary holds (a piece inside a word starts with ``##``); a word that cannot be cut, or
longer than :data:`MAX_WORD_CHARS`, is ``[UNK]``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Mapping

__all__ = ["MAX_WORD_CHARS", "WordPiece"]

MAX_WORD_CHARS = 100

_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(code: int) -> bool:
    return any(low <= code <= high for low, high in _CJK)


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


class WordPiece:
    """Text to the vocabulary's ids.

    Args:
        vocab: Each piece's id (``vocab.txt``: the piece on line N has id N).
    """

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self.vocab = dict(vocab)
        self.unknown = self.vocab["[UNK]"]
        self.start = self.vocab["[CLS]"]
        self.end = self.vocab["[SEP]"]
        self._words: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_file(cls, path: str) -> WordPiece:
        """The tokeniser of a ``vocab.txt``."""
        with open(path, encoding="utf-8") as lines:
            return cls({line.rstrip("\n"): index for index, line in enumerate(lines)})

    def ids(self, text: str, limit: int) -> list[int]:
        """``[CLS]``, the text's pieces (as many as fit), ``[SEP]``: at most ``limit`` ids."""
        pieces = [self.start]
        room = limit - 1
        for word in self._basic(text):
            cut = self._words.get(word)
            if cut is None:
                cut = self._cut(word)
                if len(self._words) < 200_000:
                    self._words[word] = cut
            pieces.extend(cut)
            if len(pieces) >= room:
                del pieces[room:]
                break
        pieces.append(self.end)
        return pieces

    def _basic(self, text: str) -> Iterator[str]:
        """The words and punctuation marks of ``text``, lower case, accents off."""
        cleaned: list[str] = []
        for char in text:
            code = ord(char)
            if code == 0 or code == 0xFFFD or _is_control(char):
                continue
            if _is_whitespace(char):
                cleaned.append(" ")
            elif _is_cjk(code):
                cleaned.append(f" {char} ")
            else:
                cleaned.append(char)
        for token in "".join(cleaned).split():
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(c for c in token if unicodedata.category(c) != "Mn")
            word: list[str] = []
            for char in token:
                if _is_punctuation(char):
                    if word:
                        yield "".join(word)
                        word = []
                    yield char
                else:
                    word.append(char)
            if word:
                yield "".join(word)

    def _cut(self, word: str) -> tuple[int, ...]:
        """The word's pieces, longest first from the left; ``[UNK]`` when it has none."""
        if len(word) > MAX_WORD_CHARS:
            return (self.unknown,)
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found: int | None = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return (self.unknown,)
            pieces.append(found)
            start = end
        return tuple(pieces)
