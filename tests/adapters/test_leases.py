"""Leases, membership and consumer names on a real Redis (embedded and Debian's)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from orchestrator.adapters.leases import Leases
from orchestrator.core.wire import daemon_key, lease_key
from orchestrator.errors import ConfigError


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


NAMES = ["p0", "p1", "p2", "p3", "p4"]


async def test_a_lease_has_one_holder_until_given_back(redis: Redis):
    a, b = Leases(redis, "a", 10_000), Leases(redis, "b", 10_000)
    assert await a.acquire(NAMES, take=3) == {"p0", "p1", "p2"}
    assert await b.acquire(NAMES, take=5) == {"p3", "p4"}
    # Renewing takes nothing new when asked for nothing new.
    assert await a.acquire(NAMES, take=0) == {"p0", "p1", "p2"}
    await b.release(["p0", "p3"])  # p0 is not b's: left alone
    assert await a.acquire(NAMES, take=5) == {"p0", "p1", "p2", "p3"}
    assert await redis.mget([lease_key("p3"), lease_key("p4")]) == [b"a", b"b"]


async def test_a_lease_not_renewed_runs_out_and_another_daemon_takes_it(redis: Redis):
    dying, other = Leases(redis, "dying", 200), Leases(redis, "other", 10_000)
    assert await dying.acquire(["router"], take=1) == {"router"}
    assert await other.acquire(["router"], take=1) == set()
    await asyncio.sleep(0.35)  # the scenario: longer than the 200 ms lease, with no renewal
    assert await other.acquire(["router"], take=1) == {"router"}
    assert await dying.acquire(["router"], take=1) == set()


async def test_members_join_leave_and_expire(redis: Redis):
    a, b, brief = Leases(redis, "a", 10_000), Leases(redis, "b", 10_000), Leases(redis, "c", 200)
    await a.members()
    await brief.members()
    assert await b.members() == ["a", "b", "c"]
    await asyncio.sleep(0.35)  # the scenario: longer than c's 200 ms membership, not renewed
    assert await a.members() == ["a", "b"]
    await b.members(join=False)
    assert await a.members() == ["a"]


async def test_a_consumer_name_is_held_by_one_live_process(redis: Redis):
    first = Leases(redis, "node", 10_000)
    assert await first.claim_name() is None
    assert await first.claim_name() is None  # renewing is fine
    # A live process on this machine holds it: refused, and it says who.
    live = os.getppid()
    await redis.set(daemon_key("node"), f"{socket.gethostname()} {live}")
    taken = await first.claim_name()
    assert taken is not None
    assert taken.here
    assert taken.holder.endswith(f" {live}")
    # A process that is gone (a daemon killed with -9): its name is taken over at once.
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    await redis.set(daemon_key("node"), f"{socket.gethostname()} {gone.pid}")
    assert await first.claim_name() is None
    assert (await redis.get(daemon_key("node"))).decode() == first.me
    # Held from another machine: refused, and not known to be alive or dead from here.
    await redis.set(daemon_key("node"), "elsewhere 1")
    taken = await first.claim_name()
    assert taken is not None
    assert not taken.here
    await first.drop_name()
    assert await redis.get(daemon_key("node")) == b"elsewhere 1"  # not ours to drop


async def test_leases_need_a_sensible_time_limit(redis: Redis):
    with pytest.raises(ValueError, match="at least 100 ms"):
        Leases(redis, "a", 10)


def test_settings_reject_a_too_short_lease():
    from orchestrator.settings import load_settings

    with pytest.raises(ConfigError, match="ARENA_LEASE_TTL_S"):
        load_settings(lease_ttl_s=0.01)
