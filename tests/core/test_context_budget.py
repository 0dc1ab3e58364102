"""The token budget planner: layer caps, history fill and the degradation order."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.context.budget import (
    BudgetRequest,
    ContextPlan,
    HistoryItem,
    LayerBudgets,
    RecallItem,
    plan_context,
)
from orchestrator.core.context.tokens import TokenCounter

COUNTER = TokenCounter()
# The caps these tests are written against (the daemon's own come from Settings).
BUDGETS = LayerBudgets(identity=500, summary=500, memory_md=800, logs=600, recall=400)

# Each degradation step, in the documented order, and how its decision reads.
STEPS = (
    ("recall", re.compile(r"^dropped \d+ recalled memor")),
    ("replies", re.compile(r"^trimmed \d+ older agent repl")),
    ("window", re.compile(r"^history window shrunk: \d+ oldest")),
    ("logs", re.compile(r"^logs truncated to \d+ tokens")),
    ("memory", re.compile(r"^MEMORY\.md shrunk to its newest lines \(\d+ tokens\)")),
    ("summary", re.compile(r"^summary truncated to \d+ tokens")),
    ("over", re.compile(r"^over budget")),
)


def _steps(plan: ContextPlan) -> list[str]:
    return [name for d in plan.decisions for name, pattern in STEPS if pattern.match(d)]


def _words(prefix: str, n: int) -> str:
    return "".join(f" {prefix}{i}" for i in range(n))


def _lines(prefix: str, n: int) -> str:
    return "".join(f"{prefix} line {i}: something happened\n" for i in range(n))


def _item(n: int, text: str, *, own: bool = False, agent: bool = False) -> HistoryItem:
    return HistoryItem(
        id=f"m{n}", text=text, tokens=COUNTER.count(text), own_reply=own, agent_reply=agent
    )


def _recall(n: int, score: float) -> RecallItem:
    text = _words(f"r{n}x", 15)
    return RecallItem(id=f"r{n}", text=text, tokens=COUNTER.count(text), score=score)


HISTORY = (
    _item(0, "[alex (human)]:" + _words("a", 15)),
    _item(1, "[architect (agent)]:" + _words("b", 200), agent=True),
    _item(2, _words("c", 200), own=True, agent=True),
    _item(3, "[alex (human)]:" + _words("d", 15)),
    _item(4, "[qa (agent)]:" + _words("e", 200), agent=True),
    _item(5, "[alex (human)]: @dev what next?"),
)
TRIGGER = HISTORY[-1]


def _request(window: int, **changes: object) -> BudgetRequest:
    fields: dict[str, object] = {
        "window": window,
        "reserved_output": 0,
        "overhead_tokens": 50,
        "identity": "# dev\nYou are dev, the developer." + _words("i", 40),
        "summary": "The group is building a parser." + _words("s", 40),
        "memory_md": _lines("memory", 6),
        "logs": _lines("log", 6),
        "recall": (_recall(1, 0.9), _recall(2, 0.5), _recall(3, 0.1)),
        "history": HISTORY,
    }
    fields.update(changes)
    return BudgetRequest(**fields)  # type: ignore[arg-type]


def _sizes() -> dict[str, int]:
    """Token sizes of the standard request's layers, with nothing cut."""
    plan = plan_context(_request(100_000), BUDGETS, counter=COUNTER)
    assert plan.decisions == ()
    return dict(plan.tokens)


def test_generous_window_keeps_everything_without_decisions():
    """With room to spare every layer is shown whole and nothing is decided."""
    request = _request(100_000)
    plan = plan_context(request, BUDGETS)
    assert plan.decisions == ()
    assert not plan.over_budget
    assert (plan.identity, plan.summary, plan.memory_md, plan.logs) == (
        request.identity,
        request.summary,
        request.memory_md,
        request.logs,
    )
    assert [r.score for r in plan.recall] == [0.9, 0.5, 0.1]
    assert plan.history == HISTORY
    layers = ("identity", "summary", "memory_md", "logs", "recall", "history", "overhead")
    assert plan.tokens["total"] == sum(plan.tokens[layer] for layer in layers)
    assert plan.tokens["history"] == sum(item.tokens for item in HISTORY)
    assert plan.available == 100_000


def test_layers_appear_capped_to_their_budgets():
    """Oversized layers are each cut to their own budget, in layer order, and recorded."""
    budgets = LayerBudgets(identity=40, summary=30, memory_md=50, logs=45, recall=130)
    request = _request(
        100_000,
        identity=_words("i", 100),
        summary=_words("s", 100),
        memory_md=_lines("memory", 40),
        logs=_lines("log", 40),
    )
    plan = plan_context(request, budgets)
    for layer in ("identity", "summary", "memory_md", "logs", "recall"):
        assert 0 < plan.tokens[layer] <= getattr(budgets, layer)
    assert request.identity.startswith(plan.identity)
    assert request.summary.startswith(plan.summary)
    assert request.memory_md.endswith(plan.memory_md)
    assert plan.memory_md.startswith("memory line")
    assert request.logs.endswith(plan.logs)
    assert [r.id for r in plan.recall] == ["r1", "r2"]
    assert plan.decisions == (
        "identity truncated to its 40-token budget",
        "summary truncated to its 30-token budget",
        "MEMORY.md kept to its newest lines within its 50-token budget",
        "logs kept to their newest lines within their 45-token budget",
        "left out 1 of 3 recalled memories beyond the 130-token recall budget",
    )


def test_history_fills_what_remains_newest_first():
    """History takes the newest messages that fit what the other layers leave."""
    sizes = _sizes()
    budgets = replace(BUDGETS, min_history_messages=1)
    fixed = sizes["total"] - sizes["history"]
    room = TRIGGER.tokens + HISTORY[-2].tokens + 5
    plan = plan_context(_request(fixed + room), budgets)
    assert plan.history == HISTORY[-2:]
    assert plan.decisions == (
        f"history filled the {room} tokens that remained: 4 oldest messages left out",
    )
    assert plan.tokens["total"] <= plan.available


def _forcing_windows() -> dict[str, int]:
    """For each step, the largest window that forces it (and every step before it)."""
    s = _sizes()
    fixed = s["identity"] + s["summary"] + s["memory_md"] + s["logs"] + s["overhead"]
    trimmed = sum(
        COUNTER.count(COUNTER.head_tail(item.text, BUDGETS.trimmed_reply)) for item in HISTORY[1:3]
    )
    history_after_trim = s["history"] - HISTORY[1].tokens - HISTORY[2].tokens + trimmed
    bare = s["identity"] + TRIGGER.tokens + s["overhead"]
    return {
        "recall": s["total"] - 1,
        "replies": s["total"] - s["recall"] - 1,
        "window": fixed + history_after_trim - 1,
        "logs": fixed + TRIGGER.tokens - 1,
        "memory": fixed - s["logs"] + TRIGGER.tokens - 1,
        "summary": bare + s["summary"] - 1,
        "over": bare - 1,
    }


@pytest.mark.parametrize("step", [name for name, _ in STEPS])
def test_tiny_windows_force_each_degradation_step_in_turn(step: str):
    """Shrinking the window forces each step in the documented order, each one named."""
    window = _forcing_windows()[step]
    plan = plan_context(_request(window), BUDGETS)
    names = [name for name, _ in STEPS]
    assert _steps(plan) == names[: names.index(step) + 1]
    assert plan.over_budget == (step == "over")
    if not plan.over_budget:
        assert plan.tokens["total"] <= plan.available
    assert plan.history[-1] == TRIGGER


def test_each_step_stops_as_soon_as_it_fits():
    """Steps take only what they must: one recall item, one trimmed reply, one old message."""
    windows = _forcing_windows()
    plan = plan_context(_request(windows["recall"]), BUDGETS)
    assert [r.id for r in plan.recall] == ["r1", "r2"]
    assert "dropped 1 recalled memory" in plan.decisions
    plan = plan_context(_request(windows["replies"]), BUDGETS)
    assert "trimmed 1 older agent reply to head+tail" in plan.decisions
    assert re.search(r"\[… \d+ tokens trimmed …\]", plan.history[1].text)
    assert plan.history[2] == HISTORY[2]
    assert plan.history[-2] == HISTORY[-2]
    plan = plan_context(_request(windows["window"]), BUDGETS)
    assert "history window shrunk: 1 oldest message left out" in plan.decisions
    assert [item.id for item in plan.history] == ["m1", "m2", "m3", "m4", "m5"]


def test_the_two_newest_messages_are_never_trimmed():
    """Degradation trims older agent replies only; the newest two keep their full text."""
    plan = plan_context(_request(_forcing_windows()["logs"] + 400), BUDGETS)
    assert plan.history[-1] == TRIGGER
    for item in plan.history:
        if item.id in ("m4", "m5"):
            assert item == HISTORY[int(item.id[1:])]


def test_degradation_order_holds_over_every_window():
    """Across a sweep of windows, steps only ever appear in the documented order."""
    total = _sizes()["total"]
    names = [name for name, _ in STEPS]
    seen: set[str] = set()
    for window in range(1, total + 20, 3):
        steps = _steps(plan_context(_request(window), BUDGETS, counter=COUNTER))
        assert [names.index(s) for s in steps] == sorted({names.index(s) for s in steps})
        seen.update(steps)
    assert seen == set(names)


def test_identity_survives_every_squeeze():
    """Identity is shown whole (within its cap) at every window, even over budget."""
    request = _request(1)
    for window in (1, 50, 150, 300, 600, 1200):
        plan = plan_context(_request(window), BUDGETS)
        assert plan.identity == request.identity
        assert plan.history[-1] == TRIGGER
    assert plan_context(request, BUDGETS).over_budget


def test_over_budget_keeps_identity_and_trigger_and_says_so():
    """When identity, trigger and overhead alone overflow, the plan keeps them and is flagged."""
    plan = plan_context(_request(100, reserved_output=50), BUDGETS)
    assert plan.over_budget
    assert plan.available == 50
    assert plan.history == (TRIGGER,)
    assert (plan.summary, plan.memory_md, plan.logs, plan.recall) == ("", "", "", ())
    assert plan.decisions[-1].startswith("over budget: identity, trigger and fixed prompt text")


def test_trigger_kept_even_when_it_alone_overflows():
    """A trigger bigger than the whole window is still in the plan."""
    huge = _item(9, _words("z", 3000))
    plan = plan_context(_request(2000, history=(*HISTORY, huge)), BUDGETS)
    assert plan.history == (huge,)
    assert plan.over_budget


def test_ten_thousand_messages_are_not_recounted():
    """Planning over 10,000 stored messages uses their counts and tokenises none of them."""
    history = tuple(
        HistoryItem(id=f"m{n}", text=f"message {n}", tokens=12, agent_reply=n % 3 == 0)
        for n in range(10_000)
    )
    for window in (500_000, 60_000, 2_000, 300):
        counter = TokenCounter()
        plan = plan_context(_request(window, history=history), BUDGETS, counter=counter)
        assert plan.history[-1] is history[-1]
        assert counter.calls <= 12
    counter = TokenCounter()
    plan = plan_context(_request(500_000, history=history), BUDGETS, counter=counter)
    assert len(plan.history) == 10_000
    assert counter.calls == 4


def test_correction_scales_estimates_and_caps():
    """With a correction factor, corrected estimates stay within caps and the window."""
    budgets = replace(BUDGETS, identity=100)
    request = _request(1_000, identity=_words("i", 300), correction=1.5)
    plan = plan_context(request, budgets)
    assert plan.tokens["identity"] <= 100
    assert COUNTER.count(plan.identity) <= 100 / 1.5
    assert plan.tokens["overhead"] == 75
    assert plan.tokens["total"] <= plan.available


def test_plan_says_what_was_kept():
    """The plan lists tokens, decisions and what was kept, as the cost report shows them."""
    plan = plan_context(_request(_forcing_windows()["recall"]), BUDGETS)
    assert [item.id for item in plan.recall] == ["r1", "r2"]
    assert plan.history == HISTORY
    assert plan.decisions[-1] == "dropped 1 recalled memory"
    assert set(plan.tokens) >= {"identity", "history", "total"}


def test_invalid_requests_are_rejected():
    """Requests without a trigger, with a bad window or correction, and bad budgets raise."""
    with pytest.raises(ValueError, match="trigger"):
        _request(1000, history=())
    with pytest.raises(ValueError, match="window"):
        _request(0)
    with pytest.raises(ValueError, match="correction"):
        _request(1000, correction=0.0)
    with pytest.raises(ValueError, match="budget"):
        replace(BUDGETS, logs=-1)
    with pytest.raises(ValueError, match="min_history_messages"):
        replace(BUDGETS, min_history_messages=0)


def _texts(max_lines: int) -> st.SearchStrategy[str]:
    line = st.integers(min_value=0, max_value=30).map(lambda n: _words("t", n) + "\n")
    return st.lists(line, max_size=max_lines).map("".join)


history_items = st.lists(
    st.tuples(st.integers(min_value=0, max_value=120), st.booleans()),
    min_size=1,
    max_size=25,
).map(
    lambda specs: tuple(
        _item(n, _words("h", size), agent=agent) for n, (size, agent) in enumerate(specs)
    )
)
recall_items = st.lists(
    st.tuples(st.integers(min_value=0, max_value=80), st.floats(0, 1)), max_size=6
).map(
    lambda specs: tuple(
        RecallItem(id=f"r{n}", text="x", tokens=size, score=score)
        for n, (size, score) in enumerate(specs)
    )
)
budget_sets = st.builds(
    LayerBudgets,
    identity=st.integers(min_value=8, max_value=600),
    summary=st.integers(min_value=0, max_value=600),
    memory_md=st.integers(min_value=0, max_value=600),
    logs=st.integers(min_value=0, max_value=600),
    recall=st.integers(min_value=0, max_value=400),
    min_history_messages=st.integers(min_value=1, max_value=8),
    trimmed_reply=st.integers(min_value=0, max_value=100),
)


def _cut(request: BudgetRequest, plan: ContextPlan) -> dict[str, bool]:
    history_cut = len(plan.history) < len(request.history) or any(
        item.text != request.history[-len(plan.history) + n].text
        for n, item in enumerate(plan.history)
    )
    return {
        "identity": plan.identity != request.identity,
        "summary": plan.summary != request.summary,
        "MEMORY.md": plan.memory_md != request.memory_md,
        "logs": plan.logs != request.logs,
        "recalled memor": len(plan.recall) < len(request.recall),
        "history|agent repl": history_cut,
    }


@settings(max_examples=120, deadline=None)
@given(
    identity=_texts(20).filter(bool),
    summary=_texts(20),
    memory_md=_texts(40),
    logs=_texts(40),
    recall=recall_items,
    history=history_items,
    window=st.integers(min_value=1, max_value=4_000),
    reserved=st.integers(min_value=0, max_value=1_000),
    overhead=st.integers(min_value=0, max_value=400),
    correction=st.floats(min_value=0.8, max_value=1.6),
    budgets=budget_sets,
)
def test_plan_properties(
    identity,
    summary,
    memory_md,
    logs,
    recall,
    history,
    window,
    reserved,
    overhead,
    correction,
    budgets,
):
    """Any layers and window: fits unless over budget, keeps identity and trigger, explains cuts."""
    request = BudgetRequest(
        window=window,
        reserved_output=reserved,
        overhead_tokens=overhead,
        identity=identity,
        summary=summary,
        memory_md=memory_md,
        logs=logs,
        recall=recall,
        history=history,
        correction=correction,
    )
    plan = plan_context(request, budgets, COUNTER)
    assert plan.over_budget or plan.tokens["total"] <= plan.available
    if plan.over_budget:
        assert plan.tokens["total"] > plan.available
        assert plan.history == (history[-1],)
    assert plan.identity
    assert identity.startswith(plan.identity)
    assert plan.history[-1] == history[-1]
    assert [i.id for i in plan.history] == [
        i.id for i in history[len(history) - len(plan.history) :]
    ]
    for layer in ("identity", "summary", "memory_md", "logs", "recall"):
        assert plan.tokens[layer] <= getattr(budgets, layer)
    for label, cut in _cut(request, plan).items():
        if cut:
            assert any(re.search(label, d) for d in plan.decisions), label


def test_the_oldest_message_shown_states_its_date():
    """When the window leaves out the day's first message, the oldest one shown gets its date
    back (after the label's opening bracket), and its tokens are counted."""
    counter = TokenCounter()
    items = [
        HistoryItem(id=str(n), text=f"[10:0{n} alex (human)]: {'word ' * 40}", tokens=50)
        for n in range(1, 4)
    ]
    dated = [
        replace(item, date="2026-03-01 ", date_tokens=counter.count("2026-03-01 "))
        for item in items
    ]
    trigger = HistoryItem(id="t", text="[10:09 alex (human)]: next?", tokens=10)
    request = BudgetRequest(
        window=150, reserved_output=0, overhead_tokens=0, identity="", history=[*dated, trigger]
    )
    plan = plan_context(request, replace(BUDGETS, min_history_messages=1), counter=counter)
    assert [item.id for item in plan.history] == ["2", "3", "t"]
    assert plan.history[0].text.startswith("[2026-03-01 10:02 alex (human)]: ")
    assert plan.history[1].text.startswith("[10:03 alex (human)]: ")
    assert plan.tokens["history"] == 50 + 50 + 10 + counter.count("2026-03-01 ")
