"""The Anthropic Messages API as a model provider.

``AnthropicProvider.complete`` sends one non-streaming request and returns a ``Completion``.
The system prompt goes as a single text block marked ``cache_control: ephemeral``, so the
stable prompt prefix is cached between turns. A call is tried again after 408, 409, 429 and
5xx answers (529 "overloaded" included) and connection failures, up to ``max_retries`` times,
waiting what the answer's ``retry-after`` says or else an exponential backoff. The retries
are made here, not by the SDK, so that they leave a trace: the completion lists why each
earlier attempt failed, and one warning is logged per call that needed them. What still
fails comes out as ``LLMError``, whose ``retryable`` says whether a later attempt could
succeed and whose problem names the earlier failures. No SDK exception leaves this module.

The SDK (2.x) has no ``temperature`` argument any more, so the agent's temperature is sent in
the request body. Recent models refuse any temperature with a 400; the provider then repeats
the call without it and stops sending one to that model.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import anthropic
from anthropic.types import Message, MessageParam, TextBlock, TextBlockParam, ToolUseBlock

from orchestrator.core.models import Completion, LLMRequest, Usage
from orchestrator.core.tools import ToolCall, ToolExchange
from orchestrator.errors import LLMError

__all__ = ["DEFAULT_BASE_URL", "AnthropicProvider"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"

# Longest pause between attempts when the server sends no retry-after.
_MAX_BACKOFF_S = 8.0
_PROBLEM_LIMIT = 300


class AnthropicProvider:
    """Calls Claude through ``anthropic.AsyncAnthropic``; one instance is shared by all agents."""

    name = "anthropic"
    offline = False

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        deadline_s: float | None = None,
        backoff_s: float = 0.5,
    ) -> None:
        """Create the client; no connection is made until the first call.

        Args:
            api_key: The Anthropic API key.
            base_url: Where the Messages API lives; None means the public endpoint.
            timeout_s: Limit on each network operation of one attempt.
            max_retries: Attempts made after the first one fails retryably.
            deadline_s: Limit on a whole call, retries and backoff included. By default,
                enough for every attempt to connect and read within its timeouts and every
                pause to take its longest backoff.
            backoff_s: The first pause between attempts when the server says nothing; it
                doubles at each retry, up to 8 s, less up to a quarter at random.
        """
        # base_url is always given, so the SDK never falls back to the environment; the SDK
        # makes one attempt per call, the retries are ours (see the module docstring).
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url or DEFAULT_BASE_URL,
            timeout=timeout_s,
            max_retries=0,
            # aiohttp's transport: httpx's pool looks at every idle connection (a system call
            # each) before each request, a third of a call's CPU with 200 groups in flight.
            http_client=anthropic.DefaultAioHttpClient(),
        )
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._no_temperature: set[str] = set()
        # timeout_s bounds each network operation, so an attempt that connects slowly and
        # then reads slowly takes up to twice as long without the SDK timing out.
        self._deadline_s = deadline_s or (
            2 * timeout_s * (max_retries + 1) + _MAX_BACKOFF_S * max_retries
        )

    async def complete(self, request: LLMRequest) -> Completion:
        """Send one request to the Messages API.

        Args:
            request: The system prompt, the turns and the parameters of the call.

        Returns:
            The concatenated text blocks of the answer, with usage, stop reason and latency.

        Raises:
            LLMError: the call failed after the SDK's retries, the deadline passed, or the
                request has a turn whose role is not "user" or "assistant".
        """
        system: list[TextBlockParam] = [
            {"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}
        ]
        if request.system_tail:
            # After the cache breakpoint: the part that changes every turn.
            system.append({"type": "text", "text": request.system_tail})
        messages = _message_params(request.messages) + _exchange_params(request.exchanges)
        started = time.perf_counter()
        failed: list[str] = []
        try:
            async with asyncio.timeout(self._deadline_s):
                message = await self._attempts(request, system, messages, failed)
        except anthropic.AnthropicError as exc:
            raise _translate(exc, self._timeout_s, failed) from exc
        except TimeoutError as exc:
            problem = f"no answer within {self._deadline_s:g} s, retries included"
            problem += _earlier(failed)
            raise LLMError(provider=self.name, problem=problem, retryable=True) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        if failed:
            logger.warning(
                "anthropic %s answered at attempt %d of %d, after %s",
                request.model,
                len(failed) + 1,
                self._max_retries + 1,
                ", ".join(failed),
            )
        usage = message.usage
        completion = Completion(
            text="".join(block.text for block in message.content if isinstance(block, TextBlock)),
            model=message.model,
            provider=self.name,
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_creation_tokens=usage.cache_creation_input_tokens or 0,
            ),
            stop_reason=message.stop_reason,
            latency_ms=latency_ms,
            failed_attempts=tuple(failed),
            tool_calls=tuple(
                ToolCall(id=block.id, name=block.name, input=block.input)
                for block in message.content
                if isinstance(block, ToolUseBlock)
            ),
        )
        logger.debug(
            "anthropic %s: %d in (%d cached), %d out, stop %s, %.0f ms",
            completion.model,
            completion.usage.input_tokens,
            completion.usage.cache_read_tokens,
            completion.usage.output_tokens,
            completion.stop_reason,
            latency_ms,
        )
        return completion

    async def _attempts(
        self,
        request: LLMRequest,
        system: list[TextBlockParam],
        messages: list[MessageParam],
        failed: list[str],
    ) -> Message:
        """Call the API until an attempt answers, a failure is final or the retries run out;
        each retried failure is added to ``failed``.

        Raises:
            anthropic.AnthropicError: the last attempt's error.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline_s
        while True:
            try:
                return await self._create(request, system, messages)
            except anthropic.AnthropicError as exc:
                if len(failed) >= self._max_retries or not _worth_retrying(exc):
                    raise
                pause = self._pause_s(len(failed), exc)
                if loop.time() + pause >= deadline:
                    raise  # waiting would outlast the call: this error says more
                failed.append(_reason(exc))
                logger.debug("anthropic: %s; trying again in %.2f s", failed[-1], pause)
                await asyncio.sleep(pause)

    def _pause_s(self, retries_taken: int, exc: anthropic.AnthropicError) -> float:
        """How long to wait before the next attempt: what the server asked, if it did."""
        asked = _retry_after_s(exc)
        if asked is not None and asked >= 0:
            return asked  # beyond the call's deadline, the call ends with this error
        pause = min(self._backoff_s * 2.0**retries_taken, _MAX_BACKOFF_S)
        return pause * (1 - 0.25 * random.random())  # jitter: clients do not retry in step

    async def _create(
        self, request: LLMRequest, system: list[TextBlockParam], messages: list[MessageParam]
    ) -> Message:
        """Call the API, with the temperature unless the model is known to refuse it."""
        send_temperature = request.model not in self._no_temperature
        body: dict[str, Any] = {}
        if request.tools:
            body["tools"] = [dict(tool) for tool in request.tools]
            if not request.may_call_tools:
                body["tool_choice"] = {"type": "none"}  # the last step: text only
        try:
            return await self._client.messages.create(
                model=request.model,
                max_tokens=request.max_tokens,
                system=system,
                messages=messages,
                extra_body=body | {"temperature": request.temperature}
                if send_temperature
                else body or None,
            )
        except anthropic.BadRequestError as exc:
            if not (send_temperature and _refuses_temperature(exc)):
                raise
        self._no_temperature.add(request.model)
        logger.warning("model %s refuses a temperature; sending none from now on", request.model)
        return await self._client.messages.create(
            model=request.model,
            max_tokens=request.max_tokens,
            system=system,
            messages=messages,
            extra_body=body or None,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections; the provider cannot be used afterwards."""
        await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _message_params(messages: Iterable[Mapping[str, str]]) -> list[MessageParam]:
    """The turns in the SDK's shape; only "user" and "assistant" turns are accepted."""
    params: list[MessageParam] = []
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content", "")
        if role == "user":
            params.append({"role": "user", "content": content})
        elif role == "assistant":
            params.append({"role": "assistant", "content": content})
        else:
            problem = f"turn {index} has role {role!r}; expected 'user' or 'assistant'"
            raise LLMError(provider=AnthropicProvider.name, problem=problem, retryable=False)
    return params


def _exchange_params(exchanges: Iterable[ToolExchange]) -> list[MessageParam]:
    """Each tool step as two turns: the model's text and ``tool_use`` blocks, then our
    ``tool_result`` blocks."""
    params: list[MessageParam] = []
    for exchange in exchanges:
        said: list[Any] = [{"type": "text", "text": exchange.text}] if exchange.text else []
        said += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input}
            for c in exchange.calls
        ]
        results: list[Any] = [
            {
                "type": "tool_result",
                "tool_use_id": r.call_id,
                "content": r.content or "(empty)",
                "is_error": r.is_error,
            }
            for r in exchange.results
        ]
        params.append({"role": "assistant", "content": said})
        params.append({"role": "user", "content": results})
    return params


def _refuses_temperature(exc: anthropic.BadRequestError) -> bool:
    """Whether a 400 answer says the model does not take a temperature."""
    return "temperature" in (exc.api_message or exc.message)


def _worth_retrying(exc: anthropic.AnthropicError) -> bool:
    """Whether another attempt may succeed (the rule the SDK's own retries follow)."""
    if isinstance(exc, anthropic.APIStatusError):
        told = exc.response.headers.get("x-should-retry")
        if told in ("true", "false"):
            return told == "true"
        return _transient(exc.status_code)
    return isinstance(exc, anthropic.APIConnectionError)  # timeouts included


def _transient(status: int) -> bool:
    return status in {408, 409, 429} or status >= 500


def _retry_after_s(exc: anthropic.AnthropicError) -> float | None:
    """The wait a failed answer asks for (``retry-after-ms``, or ``retry-after`` in seconds
    or as a date), if any."""
    if not isinstance(exc, anthropic.APIStatusError):
        return None
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers.get(name, "")) * scale
        except ValueError:
            pass
    when = email.utils.parsedate_tz(headers.get("retry-after", ""))
    return None if when is None else email.utils.mktime_tz(when) - time.time()


def _reason(exc: anthropic.AnthropicError) -> str:
    """One failed attempt, briefly: ``529 overloaded_error``, ``timeout``, ``connection``."""
    if isinstance(exc, anthropic.APIStatusError):
        return f"{exc.status_code} {exc.type or 'error'}"
    if isinstance(exc, anthropic.APITimeoutError):
        return "timeout"
    if isinstance(exc, anthropic.APIConnectionError):
        return "connection failed"
    return type(exc).__name__


def _earlier(failed: list[str]) -> str:
    """`` (attempt 3; before: 529 overloaded_error x2)``, or nothing for a first attempt."""
    if not failed:
        return ""
    counts = Counter(failed)
    before = ", ".join(f"{r} x{n}" if n > 1 else r for r, n in counts.items())
    return f" (attempt {len(failed) + 1}; before: {before})"


def _translate(exc: anthropic.AnthropicError, timeout_s: float, failed: list[str]) -> LLMError:
    """Our error for an SDK error: status errors keep their HTTP status; the problem ends
    with the earlier attempts' failures, if any."""
    provider = AnthropicProvider.name
    after = _earlier(failed)
    limit = _PROBLEM_LIMIT - len(after)
    if isinstance(exc, anthropic.APIStatusError):
        kind = exc.type or "error"
        detail = exc.api_message or exc.message
        return LLMError(
            provider=provider,
            problem=f"{kind}: {detail}"[:limit] + after,
            retryable=_transient(exc.status_code),
            status=exc.status_code,
        )
    if isinstance(exc, anthropic.APITimeoutError):
        problem = f"request timed out (timeout {timeout_s:g} s)"
        return LLMError(provider=provider, problem=problem + after, retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
        problem = f"cannot reach the API ({reason})"[:limit] + after
        return LLMError(provider=provider, problem=problem, retryable=True)
    problem = f"{type(exc).__name__}: {exc}"[:limit] + after
    return LLMError(provider=provider, problem=problem, retryable=False)
