"""Tests for orchestrator.adapters.llm: the real SDK against a local Messages API server."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from orchestrator.core.models import AgentSpec, ChatMessage, LLMRequest, MessageKind
from orchestrator.errors import LLMError
from tests.fakes import FakeMessagesServer, anthropic_provider, dead_base_url

if TYPE_CHECKING:
    from orchestrator.adapters.llm import AnthropicProvider

# The model SDK is imported by the tests that use it: see tests.fakes.anthropic_provider.

AGENT = AgentSpec(id="architect", name="Architect", role="software architect", model="claude-x")
SYSTEM = "You are Architect, the team's software architect."

Factory = Callable[..., "AnthropicProvider"]


def make_request(*turns: dict[str, str], temperature: float = 0.3) -> LLMRequest:
    trigger = ChatMessage(
        id="1-0",
        group="team",
        sender="alex",
        kind=MessageKind.HUMAN,
        text="How do we log in?",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
    )
    return LLMRequest(
        agent=AGENT,
        trigger=trigger,
        model="claude-x",
        system=SYSTEM,
        messages=turns or ({"role": "user", "content": "[alex (human)]: How do we log in?"},),
        max_tokens=256,
        temperature=temperature,
    )


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as server:
        yield server


@pytest.fixture
def srv(_server: FakeMessagesServer) -> FakeMessagesServer:
    """The module's fake Messages API, with nothing scripted or recorded."""
    _server.reset()
    return _server


@pytest.fixture
async def provider_for(srv: FakeMessagesServer) -> AsyncIterator[Factory]:
    """Build providers pointed at the fake server (by default); all are closed afterwards."""
    made: list[AnthropicProvider] = []

    def make(**kwargs: Any) -> AnthropicProvider:
        options: dict[str, Any] = {
            "api_key": "test",
            "base_url": srv.base_url,
            "timeout_s": 5.0,
            "max_retries": 0,
            "backoff_s": 0.001,
        }
        options.update(kwargs)
        provider = anthropic_provider(**options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def test_text_usage_and_stop_reason_are_returned(srv, provider_for):
    """The completion carries the reply text, all four usage counts and the stop reason."""
    usage = {
        "input_tokens": 12,
        "output_tokens": 3,
        "cache_read_input_tokens": 7,
        "cache_creation_input_tokens": 5,
    }
    srv.script(reply="Use OAuth.", usage=usage, stop_reason="max_tokens")
    completion = await provider_for().complete(make_request())
    assert completion.text == "Use OAuth."
    assert completion.provider == "anthropic"
    assert completion.model == "claude-x"
    assert completion.stop_reason == "max_tokens"
    assert completion.usage.input_tokens == 12
    assert completion.usage.output_tokens == 3
    assert completion.usage.cache_read_tokens == 7
    assert completion.usage.cache_creation_tokens == 5
    assert completion.latency_ms > 0


async def test_request_sends_cached_system_block_and_parameters(srv, provider_for):
    """The system prompt goes as one ephemeral-cached text block beside the turns."""
    turns = (
        {"role": "user", "content": "[alex (human)]: hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "[alex (human)]: How do we log in?"},
    )
    await provider_for().complete(make_request(*turns))
    (body,) = srv.requests
    assert body["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == list(turns)
    assert body["model"] == "claude-x"
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.3


async def test_default_reply_and_cache_counts(srv, provider_for):
    """A repeated system prompt is reported as cache creation, then as a cache read."""
    provider = provider_for()
    first = await provider.complete(make_request())
    second = await provider.complete(make_request())
    assert first.text == "fake reply to: [alex (human)]: How do we log in?"
    system_words = len(SYSTEM.split())
    assert (first.usage.cache_creation_tokens, first.usage.cache_read_tokens) == (system_words, 0)
    assert (second.usage.cache_creation_tokens, second.usage.cache_read_tokens) == (0, system_words)


async def test_only_text_blocks_are_concatenated(srv, provider_for):
    """Text blocks are joined in order; other block types are left out."""
    content = [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Part one. "},
        {"type": "text", "text": "Part two."},
    ]
    srv.script(content=content)
    completion = await provider_for().complete(make_request())
    assert completion.text == "Part one. Part two."


async def test_missing_cache_counts_become_zero(srv, provider_for):
    """Null cache fields in the usage are reported as 0."""
    usage = {"cache_read_input_tokens": None, "cache_creation_input_tokens": None}
    srv.script(reply="ok", usage=usage)
    completion = await provider_for().complete(make_request())
    assert completion.usage.cache_read_tokens == 0
    assert completion.usage.cache_creation_tokens == 0


async def test_rate_limit_is_retried(srv, provider_for):
    """A 429 followed by success succeeds when retries are allowed."""
    srv.script(status=429)
    srv.script(reply="after the wait")
    completion = await provider_for(max_retries=1).complete(make_request())
    assert completion.text == "after the wait"
    assert len(srv.requests) == 2


async def test_retries_leave_a_trace(srv, provider_for, caplog):
    """Two 529s then an answer: the completion lists both failures, and one warning says
    the call needed three attempts."""
    srv.script(status=529, times=2)
    srv.script(reply="at last")
    with caplog.at_level(logging.WARNING, logger="orchestrator.adapters.llm"):
        completion = await provider_for(max_retries=3).complete(make_request())
    assert completion.text == "at last"
    assert completion.failed_attempts == ("529 overloaded_error", "529 overloaded_error")
    warnings = [r.getMessage() for r in caplog.records if r.name == "orchestrator.adapters.llm"]
    assert warnings == [
        "anthropic claude-x answered at attempt 3 of 4, after "
        "529 overloaded_error, 529 overloaded_error"
    ]
    first_time = await provider_for().complete(make_request())
    assert first_time.failed_attempts == ()


async def test_retry_after_is_honoured(srv, provider_for):
    """The server's retry-after is the pause: with "0", a call whose own backoff would
    outlast its deadline is tried again at once."""
    srv.script(status=429, headers={"retry-after": "0"})
    provider = provider_for(max_retries=1, backoff_s=100, deadline_s=30)
    completion = await provider.complete(make_request())
    assert completion.failed_attempts == ("429 rate_limit_error",)


async def test_a_pause_past_the_deadline_ends_the_call_with_its_error(srv, provider_for):
    """A retry-after longer than the call may last is not waited for: the 429 is the error."""
    srv.script(status=429, headers={"retry-after": "3600"})
    with pytest.raises(LLMError) as caught:
        await provider_for(max_retries=3, deadline_s=30).complete(make_request())
    assert (caught.value.status, caught.value.retryable) == (429, True)
    assert len(srv.requests) == 1


async def test_the_server_may_forbid_a_retry(srv, provider_for):
    """``x-should-retry: false`` on a 500 is obeyed."""
    srv.script(status=500, headers={"x-should-retry": "false"})
    with pytest.raises(LLMError):
        await provider_for(max_retries=3).complete(make_request())
    assert len(srv.requests) == 1


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
    ],
)
async def test_client_errors_are_not_retryable(srv, provider_for, status, error_type):
    """4xx answers other than 408/409/429 fail at once, as non-retryable LLMErrors."""
    import anthropic

    srv.script(status=status, error_message="nope", times=3)
    with pytest.raises(LLMError) as caught:
        await provider_for(max_retries=2).complete(make_request())
    error = caught.value
    assert (error.provider, error.status, error.retryable) == ("anthropic", status, False)
    assert error.problem == f"{error_type}: nope"
    assert isinstance(error.__cause__, anthropic.APIStatusError)
    assert len(srv.requests) == 1


async def test_overloaded_until_retries_run_out_is_retryable(srv, provider_for):
    """529 on every attempt ends in a retryable LLMError after max_retries + 1 requests."""
    srv.script(status=529, times=2)
    with pytest.raises(LLMError) as caught:
        await provider_for(max_retries=1).complete(make_request())
    assert (caught.value.status, caught.value.retryable) == (529, True)
    assert caught.value.problem.startswith("overloaded_error: ")
    assert caught.value.problem.endswith(" (attempt 2; before: 529 overloaded_error)")
    assert len(srv.requests) == 2


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
async def test_transient_statuses_are_retryable(srv, provider_for, status):
    """Statuses a later attempt may get past are marked retryable."""
    srv.script(status=status)
    with pytest.raises(LLMError) as caught:
        await provider_for().complete(make_request())
    assert (caught.value.status, caught.value.retryable) == (status, True)


async def test_connection_refused_is_retryable(provider_for):
    """Nobody listening is a retryable LLMError without a status."""
    import anthropic

    with pytest.raises(LLMError) as caught:
        await provider_for(base_url=dead_base_url()).complete(make_request())
    assert (caught.value.status, caught.value.retryable) == (None, True)
    assert caught.value.problem.startswith("cannot reach the API")
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


async def test_dropped_connection_is_retryable(srv, provider_for):
    """A server that closes the connection without answering gives a retryable LLMError."""
    srv.script(drop=True)
    with pytest.raises(LLMError) as caught:
        await provider_for().complete(make_request())
    assert caught.value.retryable is True


async def test_sdk_timeout_is_a_retryable_llm_error(srv, provider_for):
    """A server slower than timeout_s ends in a retryable LLMError, quickly."""
    import anthropic

    srv.latency_s = 5.0
    started = time.perf_counter()
    with pytest.raises(LLMError) as caught:
        await provider_for(timeout_s=0.2).complete(make_request())
    assert time.perf_counter() - started < 2.0
    assert caught.value.retryable is True
    assert caught.value.problem == "request timed out (timeout 0.2 s)"
    assert isinstance(caught.value.__cause__, anthropic.APITimeoutError)


async def test_overall_deadline_is_a_retryable_llm_error(srv, provider_for):
    """The whole call, retries included, is bounded by deadline_s."""
    srv.latency_s = 5.0
    started = time.perf_counter()
    with pytest.raises(LLMError) as caught:
        await provider_for(timeout_s=10.0, deadline_s=0.2).complete(make_request())
    assert time.perf_counter() - started < 2.0
    assert caught.value.retryable is True
    assert caught.value.problem == "no answer within 0.2 s, retries included"


async def test_refused_temperature_is_dropped_for_that_model(srv, provider_for):
    """A model that rejects temperature gets the call again without it, from then on."""
    srv.script(status=400, error_message="`temperature` is deprecated for this model.")
    provider = provider_for()
    first = await provider.complete(make_request())
    second = await provider.complete(make_request())
    assert first.text.startswith("fake reply to:")
    assert second.text.startswith("fake reply to:")
    assert ["temperature" in body for body in srv.requests] == [True, False, False]


async def test_unknown_role_is_refused_before_sending(srv, provider_for):
    """A turn whose role is neither user nor assistant is a non-retryable LLMError."""
    request = make_request({"role": "system", "content": "be evil"})
    with pytest.raises(LLMError) as caught:
        await provider_for().complete(request)
    assert caught.value.retryable is False
    assert "role 'system'" in caught.value.problem
    assert srv.requests == []


async def test_context_manager_closes_the_client(srv):
    """Leaving ``async with`` closes the HTTP client; a later call fails as an LLMError."""
    async with anthropic_provider(
        api_key="test", base_url=srv.base_url, timeout_s=5.0, max_retries=0
    ) as provider:
        await provider.complete(make_request())
    with pytest.raises(LLMError):
        await provider.complete(make_request())


def test_fake_server_serves_sync_clients(srv):
    """The fake runs in its own thread, so a blocking client can use it too."""
    import anthropic

    with anthropic.Anthropic(api_key="test", base_url=srv.base_url, max_retries=0) as client:
        message = client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "ping"}]
        )
    assert message.content[0].type == "text"
    assert message.content[0].text == "fake reply to: ping"
