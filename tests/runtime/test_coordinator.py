"""Two coordinators on a real Redis, round by round: fair shares, hand-over only once the work
in hand is done, lost leases and partitions to resume."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from orchestrator.adapters.leases import Leases
from orchestrator.core.wire import PARTITIONS, daemon_key, lease_key
from orchestrator.errors import ConfigError
from orchestrator.runtime import coordinator as coordinator_module
from orchestrator.runtime.coordinator import Coordinator


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


class Work:
    """Which partitions have work in hand, as the consumer would say."""

    def __init__(self) -> None:
        self.busy: set[int] = set()

    def idle(self, partition: int) -> bool:
        return partition not in self.busy


def _coordinator(redis: Redis, name: str, work: Work) -> Coordinator:
    return Coordinator(Leases(redis, name, 10_000), work.idle)


async def test_partitions_are_shared_and_handed_over_only_when_idle(redis: Redis):
    work_a, work_b = Work(), Work()
    a, b = _coordinator(redis, "a", work_a), _coordinator(redis, "b", work_b)
    await a.start()
    assert a.readable == set(range(PARTITIONS))
    assert a.is_router
    assert a.fresh() == list(range(PARTITIONS))  # to be claimed before reading
    for p in a.fresh():
        a.resumed(p)
    assert a.fresh() == []

    await b.start()  # everything is a's: b waits
    assert b.readable == set()
    assert not b.is_router
    work_a.busy = set(range(PARTITIONS))  # a has work in hand everywhere
    await a.round()
    surplus = set(range(PARTITIONS)) - a.readable
    assert len(a.readable) == 8  # stops reading what it will give back...
    await b.round()
    assert b.readable == set()  # ...but holds it until its work there is done
    work_a.busy = set()
    await a.round()
    await b.round()
    assert b.readable == surplus
    assert a.readable | b.readable == set(range(PARTITIONS))
    assert sorted(b.fresh()) == sorted(surplus)

    await b.close()  # a clean stop hands everything back at once
    await a.round()
    assert a.readable == set(range(PARTITIONS))
    assert set(a.fresh()) == surplus


async def test_a_lease_taken_by_another_stops_reading_at_once(redis: Redis):
    a = _coordinator(redis, "a", Work())
    await a.start()
    await redis.set(lease_key("p3"), "intruder", px=10_000)
    await a.round()
    assert 3 not in a.readable
    assert len(a.readable) == PARTITIONS - 1


async def test_a_consumer_name_taken_over_stops_the_older_daemon(redis: Redis):
    a = _coordinator(redis, "a", Work())
    await a.start()
    await redis.set(daemon_key("a"), "elsewhere 42", px=10_000)
    with pytest.raises(ConfigError, match="another daemon runs as 'a'"):
        await a.round()


class Clock:
    """The coordinator's monotonic clock, moved by hand (a pause of the whole process)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_an_entry_skipped_in_a_pause_is_claimed_before_any_later_one(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
):
    """A pause longer than the leases' trusted time makes the consumer skip what it reads; once
    the leases are renewed, nothing newer of that partition is taken before the skipped entries
    are claimed again, so a group's messages are not answered out of order."""
    clock = Clock()
    monkeypatch.setattr(coordinator_module, "time", clock)
    a = _coordinator(redis, "a", Work())
    await a.start()
    for p in a.fresh():
        a.resumed(p)
    assert a.takes(3)

    clock.now += 9.0  # past the trusted 80 % of the 10 s leases: nothing may be taken
    assert not a.takes(3)
    a.skipped(3)  # an entry of partition 3 was read and left unacknowledged
    await a.round()  # renewed: partition 3 is readable again...
    assert 3 in a.readable
    assert not a.takes(3)  # ...but its next entry waits for the skipped one
    assert 3 in a.fresh()
    a.resumed(3)
    assert a.takes(3)


async def test_a_skipped_entry_of_a_partition_given_back_is_left_to_its_next_owner(redis: Redis):
    work_a = Work()
    a = _coordinator(redis, "a", work_a)
    await a.start()
    for p in a.fresh():
        a.resumed(p)
    b = _coordinator(redis, "b", Work())
    await b.start()
    work_a.busy = set(range(PARTITIONS))
    await a.round()  # a gives half back once its work there is done
    leaving = min(set(range(PARTITIONS)) - a.readable)
    a.skipped(leaving)
    assert leaving not in a.fresh()
    work_a.busy = set()
    await a.round()
    await b.round()
    assert leaving in b.fresh()
