"""The Python client's items: following a group yields its outbound items and, when asked, the
steps of its runs between them, in the order they happened; replies and post_and_wait never
see a step. On a real Redis, seeded with raw XADDs as the daemon and a run's worker write."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from orchestrator.client import ArenaClient
from orchestrator.core.coding import Step, steps_stream
from orchestrator.core.wire import Outbound, outbox_stream

RUN = "1-0:1:developer"


@pytest.fixture
def group(embedded_redis_url: str, unique_name: str) -> Iterator[str]:
    """A group whose run's card, two steps, reply and ``done`` are on Redis, in that order."""
    with redis.Redis.from_url(embedded_redis_url) as raw:
        outbox, steps = outbox_stream(unique_name), steps_stream(unique_name)

        def say(kind: str, item_id: str, text: str = "") -> None:
            item = Outbound(type=kind, id=item_id, group=unique_name, in_reply_to="1-0",  # type: ignore[arg-type]
                            sender="developer", kind="agent", text=text)  # fmt: skip
            raw.xadd(outbox, item.fields())  # type: ignore[arg-type]

        say("notice", f"{RUN}:run", "Developer started a run")
        for n, line in enumerate(("Write hello.py", "ok"), start=1):
            step = Step(run=RUN, n=n, at="2026-01-05T09:00:00+00:00", kind="tool", line=line)
            raw.xadd(steps, step.fields())  # type: ignore[arg-type]
        say("reply", RUN, "wrote hello.py")
        say("done", "1-0:done")
        yield unique_name


def _first(items: Iterator[Outbound | Step | None], count: int) -> list[Outbound | Step]:
    found: list[Outbound | Step] = []
    for item in items:
        if item is None:
            break  # an idle poll: everything there was read
        found.append(item)
        if len(found) == count:
            break
    return found


def test_following_with_steps_yields_them_between_the_card_and_the_reply(
    embedded_redis_url: str, group: str
):
    """``follow(steps=...)`` yields the steps as their own item type, in order."""
    with ArenaClient(embedded_redis_url) as client:
        items = _first(client.follow(group, after="0-0", block_ms=100, steps="0-0"), 10)
    shown = [(i.run, i.n, i.line) if isinstance(i, Step) else (i.type, i.id, i.text) for i in items]
    assert shown == [
        ("notice", f"{RUN}:run", "Developer started a run"),
        (RUN, 1, "Write hello.py"),
        (RUN, 2, "ok"),
        ("reply", RUN, "wrote hello.py"),
        ("done", "1-0:done", ""),
    ]


def test_following_from_the_end_yields_only_what_comes_next(embedded_redis_url: str, group: str):
    """``steps="$"`` starts after the newest step, as ``after="$"`` after the newest item."""
    with ArenaClient(embedded_redis_url) as client:
        assert client.last_step_id(group) != "0-0"
        assert _first(client.follow(group, block_ms=100, steps="$"), 10) == []


def test_outbound_consumers_never_see_a_step(embedded_redis_url: str, group: str):
    """Without ``steps``, following, ``replies`` and so ``post_and_wait`` yield only outbound
    items."""
    with ArenaClient(embedded_redis_url) as client:
        followed = _first(client.follow(group, after="0-0", block_ms=100), 10)
        replies = list(client.replies(group, "1-0", timeout_s=10))
    assert [i.type for i in followed if isinstance(i, Outbound)] == [
        "notice",
        "reply",
        "done",
    ]
    assert len(followed) == 3
    assert [r.id for r in replies] == [f"{RUN}:run", RUN]
