"""Lorebook matching: whole words and phrases, patterns, the last few messages only, priority
order within the token budget, and why each entry was given."""

from __future__ import annotations

import pytest

from orchestrator.core.lore import (
    LORE_WINDOW,
    LoreEntry,
    Said,
    check_keys,
    check_pattern,
    match_lore,
)
from orchestrator.errors import ValidationError


def entry(entry_id: int, keys=(), pattern=None, priority=50, tokens=10) -> LoreEntry:
    return LoreEntry(
        id=entry_id,
        book="lore-demo",
        keys=tuple(keys),
        pattern=check_pattern(pattern) if pattern else None,
        priority=priority,
        text=f"fact {entry_id}",
        tokens=tokens,
        trust="trusted",
    )


def said(*texts: str) -> list[Said]:
    return [Said(sender=f"p{n}", text=t) for n, t in enumerate(texts)]


def ids(hits) -> list[int]:
    return [hit.entry.id for hit in hits]


def test_a_key_matches_whole_words_and_phrases_only():
    entries = [entry(1, ["deploy"]), entry(2, ["code freeze"]), entry(3, ["ci"])]
    given, _ = match_lore(entries, said("Can we Deploy today? The code  freeze..."), 100)
    assert ids(given) == [1]
    given, _ = match_lore(entries, said("deployment of the code freeze plan, decided"), 100)
    assert ids(given) == [2], "'deployment' is not 'deploy'; 'decided' holds no 'ci' word"


def test_a_pattern_is_searched_case_insensitively():
    given, _ = match_lore([entry(1, pattern=r"\bv\d+\.\d+\b")], said("Is V2.3 out?"), 100)
    assert ids(given) == [1]
    assert given[0].why.startswith("pattern ")
    assert given[0].why.endswith(" in p0's message")


def test_only_the_last_messages_bring_lore_in():
    old = ["deploy"] + ["nothing here"] * LORE_WINDOW
    given, _ = match_lore([entry(1, ["deploy"])], said(*old), 100)
    assert given == []
    given, _ = match_lore([entry(1, ["deploy"])], said(*old[1:], "and deploy?"), 100)
    assert ids(given) == [1]


def test_priority_orders_and_the_budget_leaves_out_with_a_reason():
    entries = [
        entry(1, ["db"], priority=10, tokens=30),
        entry(2, ["db"], priority=90, tokens=30),
        entry(3, ["db"], priority=50, tokens=30),
    ]
    given, left = match_lore(entries, said("the db is slow"), 65)
    assert ids(given) == [2, 3]
    assert [(e.id, reason) for e, reason in left] == [(1, "30 tokens would pass the 65 for lore")]
    assert given[0].why == "key 'db' in p0's message"
    assert given[0].score > given[1].score > 2.0


def test_the_newest_message_is_named_in_why():
    given, _ = match_lore([entry(1, ["deploy"])], said("deploy?", "yes, deploy"), 100)
    assert given[0].why == "key 'deploy' in p1's message"


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ([" "], "must not be empty"),
        (["x" * 81], "at most 80"),
        ([str(n) for n in range(21)], "at most 20"),
    ],
)
def test_bad_keys_are_refused(keys, problem):
    with pytest.raises(ValidationError, match=problem):
        check_keys(keys)


def test_keys_are_cleaned_and_deduplicated():
    assert check_keys([" Code   Freeze ", "code freeze", "ship"]) == ("Code Freeze", "ship")


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("(", "not a regular expression"),
        ("a" * 201, "at most 200"),
        ("  ", "empty"),
        ("(a+)+$", "repeated group that itself repeats"),
        (r"(\d+)*x", "repeated group that itself repeats"),
    ],
)
def test_bad_patterns_are_refused(pattern, problem):
    with pytest.raises(ValidationError, match=problem):
        check_pattern(pattern)
