"""Model failures: a circuit breaker, failed messages in the dead letters, `arena retry`."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.adapters.breaker import CircuitBreaker
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.models import AgentSpec, ChatMessage, LLMRequest, MessageKind
from orchestrator.errors import LLMError
from tests.arena_helpers import make_settings, running_daemon
from tests.fakes import FakeMessagesServer, anthropic_provider

AGENT = AgentSpec(id="ping", name="Ping", role="player", model="claude-test")
TRIGGER = ChatMessage(
    id="1-0",
    group="g",
    sender="alex",
    kind=MessageKind.HUMAN,
    text="hi",
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
)
REQUEST = LLMRequest(
    agent=AGENT,
    trigger=TRIGGER,
    model="claude-test",
    system="s",
    messages=({"role": "user", "content": "hi"},),
    max_tokens=16,
    temperature=0.0,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_breaker_opens_after_failures_and_recovers():
    """Three 500s in a row open the circuit: the next call fails fast without reaching the
    server; after the cooldown one trial call goes through and closes it."""
    clock = Clock()
    with FakeMessagesServer() as fake:
        fake.script(status=500, times=3)
        provider = anthropic_provider(api_key="t", base_url=fake.base_url, max_retries=0)
        breaker = CircuitBreaker(provider, threshold=3, cooldown_s=30, clock=clock)
        for _ in range(3):
            with pytest.raises(LLMError):
                await breaker.complete(REQUEST)
        assert breaker.state == "open"
        with pytest.raises(LLMError, match="circuit open"):
            await breaker.complete(REQUEST)
        assert len(fake.requests) == 3
        clock.now = 31
        assert breaker.state == "half-open"
        completion = await breaker.complete(REQUEST)
        assert completion.text
        assert breaker.state == "closed"
        await breaker.aclose()


async def test_bad_requests_do_not_open_the_circuit():
    """A 400 is the request's fault, not the provider's: the circuit stays closed."""
    with FakeMessagesServer() as fake:
        fake.script(status=400, times=5)
        provider = anthropic_provider(api_key="t", base_url=fake.base_url, max_retries=0)
        breaker = CircuitBreaker(provider, threshold=2, cooldown_s=30)
        for _ in range(5):
            with pytest.raises(LLMError):
                await breaker.complete(REQUEST)
        assert breaker.state == "closed"
        await breaker.aclose()


async def test_failed_message_is_dead_lettered_and_retried(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """When the model keeps failing, the group gets a notice, the message is listed by
    `arena dead-letters`, and `arena retry` posts it again once the model is back."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    with FakeMessagesServer() as fake:
        fake.script(status=529)  # the first call fails (no retries in these settings)
        settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake.base_url)
        async with running_daemon(settings):
            client = ArenaClient(embedded_redis_url)
            message_id, replies = await asyncio.to_thread(
                client.post_and_wait, "ops", "@ping status?", "alex", 20
            )
            assert [r.type for r in replies] == ["notice"]
            listed = CliRunner().invoke(main, ["dead-letters", "--json"])
            letters = json.loads(listed.output)
            assert [(d["entry_id"], d["group"], d["text"]) for d in letters] == [
                (message_id, "ops", "@ping status?")
            ]
            assert letters[0]["reason"].startswith("model failed: ping:")
            after = client.last_reply_id("ops")
            retried = CliRunner().invoke(main, ["retry", letters[0]["id"]])
            assert retried.exit_code == 0, retried.output
            new_id = retried.output.strip()
            answers = await asyncio.to_thread(
                lambda: list(client.replies("ops", new_id, 20, after=after))
            )
            client.close()
        assert [a.type for a in answers] == ["reply"]
        assert json.loads(CliRunner().invoke(main, ["dead-letters", "--json"]).output) == []
        missing = CliRunner().invoke(main, ["retry", "1-1"])
        assert missing.exit_code == 1
        assert "no dead letter" in missing.output
