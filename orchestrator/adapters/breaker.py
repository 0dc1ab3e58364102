"""A circuit breaker around a model provider.

After ``threshold`` consecutive retryable failures (the provider's own retries already spent)
the circuit opens: calls fail at once for ``cooldown_s``, so a provider that is down is not
hammered and messages are not held up waiting for it. After the cooldown one call is let
through; its success closes the circuit, its failure opens it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from orchestrator.core.models import Completion, LLMRequest
from orchestrator.core.turns import LLM
from orchestrator.errors import LLMError

__all__ = ["CircuitBreaker"]

logger = logging.getLogger(__name__)


class CircuitBreaker:
    """Wraps an ``LLM``; the same protocol, failing fast while the provider is down."""

    def __init__(
        self,
        llm: LLM,
        *,
        threshold: int = 5,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.llm = llm
        self.name = llm.name
        self.offline = llm.offline
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial = False

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open``."""
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.cooldown_s:
            return "half-open"
        return "open"

    async def complete(self, request: LLMRequest) -> Completion:
        """Call the provider unless the circuit is open.

        Raises:
            LLMError: the provider's error, or ``circuit open`` (retryable) while it is open.
        """
        state = self.state
        if state == "open" or (state == "half-open" and self._trial):
            raise LLMError(
                self.name,
                "circuit open: the model provider is failing; try again later",
                retryable=True,
            )
        self._trial = state == "half-open"
        try:
            completion = await self.llm.complete(request)
        except LLMError as exc:
            self._failed(exc)
            raise
        finally:
            self._trial = False
        if self._opened_at is not None:
            logger.info("%s: circuit closed again", self.name)
        self._failures = 0
        self._opened_at = None
        return completion

    def _failed(self, exc: LLMError) -> None:
        if not exc.retryable:
            return  # a bad request says nothing about the provider's health
        self._failures += 1
        if self._opened_at is not None or self._failures >= self.threshold:
            if self._opened_at is None:
                logger.warning(
                    "%s: %d failures in a row; circuit open for %.0fs",
                    self.name,
                    self._failures,
                    self.cooldown_s,
                )
            self._opened_at = self._clock()

    async def aclose(self) -> None:
        """Close the provider."""
        await self.llm.aclose()
