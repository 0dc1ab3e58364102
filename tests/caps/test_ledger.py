"""The caps' ledger on a real Redis: reserved, then settled; atomic between writers; one hash
per day; each warning claimed once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from redis.asyncio import Redis

from orchestrator.caps.ledger import CapLedger, Reservation, Spent
from orchestrator.caps.limits import Breach, Cap, Scope, Unit
from orchestrator.core.wire import spend_key

BERLIN = ZoneInfo("Europe/Berlin")
NOON = datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN)


def _group_cap(limit: int) -> Cap:
    return Cap(scope=Scope.GROUP, name="demo", unit=Unit.TOKENS, limit=limit)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _spent(tokens: int) -> Spent:
    return Spent(agent="architect", group="demo", model="m", tokens=tokens, micro_usd=tokens)


async def test_a_reservation_is_settled_to_what_the_call_cost(redis: Redis):
    """The estimate is held while the call runs, then replaced by the reported usage."""
    ledger = CapLedger(redis, BERLIN)
    caps = (_group_cap(2000),)
    reserved = await ledger.reserve(caps, {Unit.TOKENS: 800}, NOON)
    assert isinstance(reserved, Reservation)
    assert int(await redis.hget(spend_key("2026-03-28"), "tokens:group:demo")) == 800
    watched = ["tokens:group:demo", "tokens:model:m", "usd:agent:architect"]
    after = await ledger.settle(reserved, _spent(300), watched)
    assert after["tokens:group:demo"] == 300
    assert after["tokens:model:m"] == 300
    assert after["usd:agent:architect"] == 300
    assert 7 * 86400 < await redis.ttl(spend_key("2026-03-28")) <= 8 * 86400
    refused = await ledger.reserve(caps, {Unit.TOKENS: 1701}, NOON)
    assert isinstance(refused, Breach)
    assert refused.used == 300


async def test_a_failed_call_gives_its_reservation_back(redis: Redis):
    """Settling with nothing spent leaves the counters as they were."""
    ledger = CapLedger(redis, BERLIN)
    reserved = await ledger.reserve((_group_cap(2000),), {Unit.TOKENS: 800}, NOON)
    assert isinstance(reserved, Reservation)
    after = await ledger.settle(reserved, None, ["tokens:group:demo"])
    assert after == {"tokens:group:demo": 0}


async def test_two_writers_never_take_more_than_the_cap_together(redis_url: str):
    """Forty reservations of 100 against a 1,000 cap from two clients: exactly ten pass."""
    clients = [Redis.from_url(redis_url), Redis.from_url(redis_url)]
    try:
        ledgers = [CapLedger(c, BERLIN) for c in clients]
        caps = (_group_cap(1000),)
        outcomes = await asyncio.gather(
            *(ledgers[n % 2].reserve(caps, {Unit.TOKENS: 100}, NOON) for n in range(40))
        )
    finally:
        for client in clients:
            await client.aclose()
    assert sum(isinstance(o, Reservation) for o in outcomes) == 10
    assert all(isinstance(o, Reservation | Breach) for o in outcomes)


async def test_each_day_has_its_own_counters(redis: Redis):
    """After local midnight the cap starts again; yesterday stays readable for the report."""
    ledger = CapLedger(redis, BERLIN)
    caps = (_group_cap(1000),)
    first = await ledger.reserve(caps, {Unit.TOKENS: 900}, NOON)
    assert isinstance(first, Reservation)
    await ledger.settle(first, _spent(1000))
    assert isinstance(await ledger.reserve(caps, {Unit.TOKENS: 1}, NOON), Breach)
    tomorrow = datetime(2026, 3, 28, 23, 30, tzinfo=UTC)  # 00:30 in Berlin
    assert isinstance(await ledger.reserve(caps, {Unit.TOKENS: 1}, tomorrow), Reservation)
    days = await ledger.read_days(tomorrow, 2)
    assert [d for d, _ in days] == [date(2026, 3, 29), date(2026, 3, 28)]
    assert days[1][1]["tokens:group:demo"] == 1000


async def test_a_warning_is_claimed_once_a_day(redis: Redis):
    """The first claim of a cap's warning wins; the second that day does not."""
    ledger = CapLedger(redis, BERLIN)
    cap = _group_cap(1000)
    assert await ledger.claim_warning("2026-03-28", cap)
    assert not await ledger.claim_warning("2026-03-28", cap)
    assert await ledger.claim_warning("2026-03-29", cap)


async def test_a_call_bigger_than_the_cap_is_refused_on_a_fresh_day(redis: Redis):
    """An estimate over the whole cap is refused even before anything was spent that day."""
    ledger = CapLedger(redis, BERLIN)
    refused = await ledger.reserve((_group_cap(100),), {Unit.TOKENS: 101}, NOON)
    assert isinstance(refused, Breach)
    assert refused.used == 0
    assert await redis.exists(spend_key("2026-03-28")) == 0
