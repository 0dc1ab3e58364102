"""Per-group ordering with concurrency across groups."""

from __future__ import annotations

import asyncio

from orchestrator.runtime.dispatch import GroupDispatcher


async def test_order_within_a_group_and_overlap_across_groups():
    """Items of one group never overlap and keep their order; groups overlap."""
    running: dict[str, int] = {}
    overlap_seen = asyncio.Event()
    done: list[tuple[str, int]] = []
    clashes: list[tuple[str, int]] = []

    async def handler(item: tuple[str, int]) -> None:
        group, _n = item
        running[group] = running.get(group, 0) + 1
        if running[group] > 1:  # recorded, not raised: the dispatcher logs a handler's errors
            clashes.append(item)
        if sum(1 for v in running.values() if v) > 1:
            overlap_seen.set()
        # Held until items of two groups run at once, which only happens if groups overlap.
        await asyncio.wait_for(overlap_seen.wait(), timeout=5)
        await asyncio.sleep(0)  # hand over the loop: a second item of this group may try to start
        done.append(item)
        running[group] -= 1

    dispatcher: GroupDispatcher[tuple[str, int]] = GroupDispatcher(handler, max_inflight=100)
    for n in range(5):
        for group in ("a", "b", "c"):
            await dispatcher.submit(group, (group, n))
    assert await dispatcher.drain(timeout_s=10)
    for group in ("a", "b", "c"):
        assert [n for g, n in done if g == group] == list(range(5))
    assert clashes == [], "two items of one group ran at once"
    assert overlap_seen.is_set()
    assert dispatcher.inflight == 0
    assert dispatcher.active_groups == 0


async def test_a_failing_item_does_not_stop_its_group():
    """An exception in one item is logged; the group's next items still run."""
    seen: list[int] = []

    async def handler(n: int) -> None:
        seen.append(n)
        if n == 1:
            raise RuntimeError("boom")

    dispatcher: GroupDispatcher[int] = GroupDispatcher(handler, max_inflight=10)
    for n in range(3):
        await dispatcher.submit("g", n)
    assert await dispatcher.drain(timeout_s=5)
    assert seen == [0, 1, 2]


async def test_inflight_limit_applies_backpressure():
    """submit() waits while max_inflight items are unfinished."""
    release = asyncio.Event()
    started: list[int] = []
    third_asked = asyncio.Event()

    async def handler(n: int) -> None:
        started.append(n)
        await release.wait()

    async def submit_third() -> None:
        third_asked.set()
        await dispatcher.submit("c", 3)

    dispatcher: GroupDispatcher[int] = GroupDispatcher(handler, max_inflight=2)
    await dispatcher.submit("a", 1)
    await dispatcher.submit("b", 2)
    third = asyncio.create_task(submit_third())
    # Once asked, the third submit has run up to its wait in the same step; only the held
    # handlers could let it through, and they are waiting for ``release``.
    await third_asked.wait()
    assert not third.done()
    assert dispatcher.inflight == 2
    assert 3 not in started
    release.set()
    await asyncio.wait_for(third, timeout=5)
    assert await dispatcher.drain(timeout_s=5)
