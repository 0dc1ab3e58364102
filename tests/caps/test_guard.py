"""Each model call through the caps: the real Anthropic SDK against the fake Messages API,
the caps' ledger on a real Redis. Refused calls never reach the model; failed ones give their
reservation back; answered ones are counted with the reported usage, priced per model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from orchestrator.caps.guard import CapGuard, CappedLLM, price_table
from orchestrator.caps.ledger import CapLedger
from orchestrator.caps.limits import CapLimits, OverCap, Price
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.models import LLMRequest
from orchestrator.core.wire import budget_topic
from orchestrator.errors import LLMError
from tests.arena_helpers import ARCHITECT, RecordingEvents, llm_request

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
AGENT = ARCHITECT
NO_CACHE = {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
PRICES = {"test-model": Price(input=3, output=15, cache_read=0.3, cache_write=3.75)}


def _request(text: str = "hello") -> LLMRequest:
    return llm_request(text, at=NOW)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _capped(model, redis: Redis, limits: CapLimits, events=None) -> tuple[CappedLLM, CapGuard]:
    guard = CapGuard(
        ledger=CapLedger(redis, UTC),
        limits=limits,
        price=price_table(PRICES),
        clock=lambda: NOW,
        events=events,
    )
    return CappedLLM(model, guard, TokenCounter()), guard


async def _today(guard: CapGuard) -> dict[str, int]:
    return (await guard.ledger.read_days(NOW, 1))[0][1]


async def test_an_answered_call_counts_its_reported_usage_and_price(model, fake_llm, redis):
    """1,000 tokens in and 200 out at $3 and $15 per Mtok: 1,200 tokens and $0.006, per
    agent, group, model and overall."""
    fake_llm.script("fine", usage={"input_tokens": 1000, "output_tokens": 200, **NO_CACHE})
    llm, guard = _capped(model, redis, CapLimits(group_tokens=10_000))
    completion = await llm.complete(_request())
    assert completion.text == "fine"
    counters = await _today(guard)
    for key in ("agent:architect", "group:demo", "model:test-model", "all:*"):
        assert counters[f"tokens:{key}"] == 1200
        assert counters[f"usd:{key}"] == 6000


async def test_a_failed_call_costs_nothing(model, fake_llm, redis):
    """A 500 from the model: the reservation is given back, nothing is counted."""
    fake_llm.script(status=500)
    llm, guard = _capped(model, redis, CapLimits(group_tokens=10_000))
    with pytest.raises(LLMError):
        await llm.complete(_request())
    assert all(v == 0 for v in (await _today(guard)).values())


async def test_a_call_over_a_cap_never_reaches_the_model(model, fake_llm, redis):
    """Over a dollar cap: OverCap names it, the server sees no request, MQTT hears of it."""
    fake_llm.script("fine", usage={"input_tokens": 1000, "output_tokens": 200, **NO_CACHE})
    events = RecordingEvents()
    llm, _guard = _capped(model, redis, CapLimits(agent_usd=0.005), events)
    await llm.complete(_request())
    with pytest.raises(OverCap, match=r"agent architect: \$0\.0060 of \$0\.0050"):
        await llm.complete(_request())
    assert len(fake_llm.requests) == 1
    assert [t for t, _ in events.events] == [budget_topic(), budget_topic()]
    assert b'"state": "warning"' in events.payloads[0]
    assert b'"state": "reached"' in events.payloads[1]


async def test_a_turn_that_would_pass_a_cap_is_announced_as_refused(model, fake_llm, redis):
    """A cap not yet full that a turn's estimate would pass: no call, MQTT hears "refused"
    with the tokens used as a whole number."""
    events = RecordingEvents()
    llm, _guard = _capped(model, redis, CapLimits(group_tokens=3), events)
    with pytest.raises(OverCap, match=r"would pass the daily budget \(group demo: 0 of 3"):
        await llm.complete(_request())
    assert fake_llm.requests == []
    (payload,) = events.payloads
    event = json.loads(payload)
    assert (event["state"], event["used"], event["cap"]) == ("refused", 0, 3)


async def test_the_warning_at_80_percent_is_given_once(model, fake_llm, redis):
    """A cap passes 80 % on the second call: one warning then, none on the third."""
    fake_llm.script("a", usage={"input_tokens": 800, "output_tokens": 0, **NO_CACHE}, times=2)
    llm, guard = _capped(model, redis, CapLimits(group_tokens=100_000, all_tokens=1900))
    await llm.complete(_request())
    assert guard.take_warnings("demo") == []  # 42 %
    await llm.complete(_request())
    (warning,) = guard.take_warnings("demo")
    assert warning.cap.key == "tokens:all:*"
    assert "daily budget 84 % used (all agents: 1,600 of 1,900 tokens)" in warning.describe()
    fake_llm.script("a", usage={"input_tokens": 10, "output_tokens": 0, **NO_CACHE})
    await llm.complete(_request())
    assert guard.take_warnings("demo") == []


async def test_a_call_that_passes_the_cap_says_it_is_used_up(model, fake_llm, redis):
    """When a call's output takes a cap past 100 %, the one warning says no more answers
    come until it resets, not a share."""
    fake_llm.script("a", usage={"input_tokens": 900, "output_tokens": 200, **NO_CACHE})
    llm, guard = _capped(model, redis, CapLimits(group_tokens=1000))
    await llm.complete(_request())
    (warning,) = guard.take_warnings("demo")
    assert warning.describe().startswith(
        "daily budget used up (group demo: 1,100 of 1,000 tokens); no more answers until it resets "
    )


async def test_a_cap_used_up_after_its_80_percent_warning_is_told_too(model, fake_llm, redis):
    """80 % is told on the first call; the next turn takes the cap past 100 %: the group is
    told it is used up, once, apart from the 80 % warning."""
    fake_llm.script("a", usage={"input_tokens": 850, "output_tokens": 0, **NO_CACHE})
    llm, guard = _capped(model, redis, CapLimits(group_tokens=1000))
    await llm.complete(_request())
    (first,) = guard.take_warnings("demo")
    assert first.describe().startswith("daily budget 85 % used (group demo: 850 of 1,000 tokens)")
    fake_llm.script("b", usage={"input_tokens": 20, "output_tokens": 300, **NO_CACHE})
    await llm.complete(_request())
    (second,) = guard.take_warnings("demo")
    assert second.describe().startswith(
        "daily budget used up (group demo: 1,170 of 1,000 tokens); no more answers until it "
    )
    fake_llm.script("c", usage={"input_tokens": 1, "output_tokens": 0, **NO_CACHE})
    with pytest.raises(OverCap, match=r"^daily budget reached \(group demo: 1,170 of 1,000"):
        await llm.complete(_request())
    assert guard.take_warnings("demo") == []


async def test_a_call_no_cap_applies_to_is_counted_in_a_batch(model, fake_llm, redis):
    """Without caps nothing is written on the reply's path; the batch lands on close."""
    fake_llm.script("a", usage={"input_tokens": 10, "output_tokens": 5, **NO_CACHE}, times=2)
    llm, guard = _capped(model, redis, CapLimits())
    await llm.complete(_request())
    await llm.complete(_request())
    await guard.aclose()
    counters = await _today(guard)
    assert counters["tokens:group:demo"] == 30
    assert counters["usd:all:*"] == 2 * (30 + 75)
