"""Daily spending caps at work: :class:`CappedLLM` checks each turn's first model call against
the caps before it is made and counts what every call cost after; :class:`CapGuard` keeps the
ledger, prices calls and collects the warnings (a cap 80 % used) the pipeline posts in the group.

A turn is admitted or refused as a whole: the memory tools' later steps of a turn already begun
are counted but not refused, since refusing one would waste the steps already paid for and leave
the message half answered. A cap can so be passed by at most one turn (at most
``ARENA_MAX_TOOL_STEPS`` more calls); the next turn is then refused.

A call over a cap raises :class:`~orchestrator.caps.limits.OverCap` instead of reaching the
model; the answerer turns it into a ``budget`` notice and the pipeline dead-letters the
message with reason ``budget`` (``arena retry`` posts it again once the cap is raised or the
day has turned).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from orchestrator.adapters.redis_client import AsyncConnection
from orchestrator.caps.configured import cap_limits
from orchestrator.caps.ledger import CapLedger, Reservation, Spent, enforced_caps
from orchestrator.caps.limits import (
    MICRO,
    Breach,
    Cap,
    CapLimits,
    OverCap,
    Price,
    Unit,
    cost_micro_usd,
    near,
    next_midnight,
    prompt_tokens,
)
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.models import AgentSpec, Completion, LLMRequest
from orchestrator.core.turns import LLM
from orchestrator.core.wire import budget_topic
from orchestrator.errors import ConfigError
from orchestrator.offline.model import OFFLINE_MODEL, prompt_words
from orchestrator.settings import Settings, priced

__all__ = [
    "CapGuard",
    "CapWarning",
    "CappedLLM",
    "caps_in_force",
    "make_guard",
    "price_table",
    "unpriced_dollar_cap",
]

logger = logging.getLogger(__name__)

_FREE = Price(input=0, output=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapWarning:
    """A cap at least 80 % used today, or used up: each told once a day."""

    cap: Cap
    used: int
    resets_at: datetime

    def describe(self) -> str:
        """One line for the group."""
        when = self.resets_at.strftime("%Y-%m-%d %H:%M %Z")
        spent = self.cap.describe(self.used)
        if self.used >= self.cap.limit:  # a turn's tool steps went past it: the next is refused
            return f"daily budget used up ({spent}); no more answers until it resets {when}"
        share = 100 * self.used // self.cap.limit
        return f"daily budget {share} % used ({spent}); resets {when}"


def price_table(prices: Mapping[str, Price]) -> Callable[[str], Price]:
    """How a model is priced: its row, nothing for ``offline``, else the dearest row (a model
    nobody priced must not slip past a dollar cap)."""
    dearest = max(prices.values(), key=lambda p: p.output + p.input, default=_FREE)

    def price(model: str) -> Price:
        if model == "offline":
            return _FREE
        return prices.get(model, dearest)

    return price


class Announcer(Protocol):
    """Where warnings are announced (MQTT); must never block."""

    def publish(self, topic: str, payload: bytes) -> None:
        """Queue one event."""
        ...


class RefusalMetrics(Protocol):
    """Where refused calls are counted (``GET /metrics``); never raises."""

    async def cap_refused(self, scope: str, unit: str) -> None:
        """Count one refused call."""
        ...


class CapGuard:
    """Reserves each call's estimate against today's caps and settles it after the call."""

    def __init__(
        self,
        *,
        ledger: CapLedger,
        limits: CapLimits,
        price: Callable[[str], Price],
        clock: Callable[[], datetime],
        events: Announcer | None = None,
        metrics: RefusalMetrics | None = None,
    ) -> None:
        self.ledger = ledger
        self.limits = limits
        self.price = price
        self.clock = clock
        self.events = events
        self.metrics = metrics
        self._pending: dict[str, list[CapWarning]] = {}

    async def admit(
        self,
        agent: str,
        group: str,
        model: str,
        tokens: Callable[[], int],
        *,
        continuing: bool = False,
    ) -> Reservation:
        """Reserve a call of about ``tokens()`` input tokens (its context; counted only when a
        cap applies). A cap can so be passed by at most one turn's output and tool steps: the
        next turn is then refused. A ``continuing`` call (a tool step of a turn already
        admitted) is not checked, only counted after it.

        Raises:
            OverCap: naming the cap the call would pass.
        """
        caps = self.limits.for_call(agent, group)
        now = self.clock()
        if not caps or continuing:  # nothing to check: the call is only counted afterwards
            return self.ledger.unchecked(now)
        estimate_in = tokens()
        estimate = {
            Unit.TOKENS: estimate_in,
            Unit.USD: round(estimate_in * self.price(model).input),
        }
        logger.debug("%s in %s: a call of about %d tokens", agent, group, estimate_in)
        outcome = await self.ledger.reserve(caps, estimate, now)
        if isinstance(outcome, Breach):
            logger.warning("%s in %s: %s", agent, group, outcome.describe())
            full = outcome.used >= outcome.cap.limit  # else this turn would have passed it
            self._announce("reached" if full else "refused", outcome.cap, outcome.used, group)
            if self.metrics is not None:
                await self.metrics.cap_refused(outcome.cap.scope.value, outcome.cap.unit.value)
            raise OverCap(outcome)
        return outcome

    async def settle(
        self, reservation: Reservation, request: LLMRequest, completion: Completion | None
    ) -> None:
        """Count what the call cost (nothing if it failed) and note caps now 80 % used."""
        agent, group = request.agent.id, request.trigger.group
        spent = None
        if completion is not None:
            usage = completion.usage
            tokens = (
                usage.input_tokens
                + usage.output_tokens
                + usage.cache_read_tokens
                + usage.cache_creation_tokens
            )
            micro_usd = cost_micro_usd(self.price(completion.model), usage)
            spent = Spent(
                agent=agent, group=group, model=completion.model, tokens=tokens, micro_usd=micro_usd
            )
        caps = self.limits.for_call(agent, group)
        if not caps and not reservation.amounts:  # nothing to check: counted in a batch
            if spent is not None:
                self.ledger.count_later(reservation.day, spent)
            return
        used = await self.ledger.settle(reservation, spent, [c.key for c in caps])
        for cap in near(caps, used):
            # Two notices a day at most: 80 % used, and used up (even after the first).
            full = used[cap.key] >= cap.limit
            if await self.ledger.claim_warning(reservation.day, cap, full=full):
                self._warn(group, cap, used[cap.key])

    async def aclose(self) -> None:
        """Count what is left to count."""
        await self.ledger.aclose()

    def take_warnings(self, group: str) -> list[CapWarning]:
        """The warnings noted for ``group`` since last asked."""
        return self._pending.pop(group, [])

    def _warn(self, group: str, cap: Cap, used: int) -> None:
        now = self.clock().astimezone(self.ledger.zone)
        warning = CapWarning(cap=cap, used=used, resets_at=next_midnight(now))
        logger.info("group %s: %s", group, warning.describe())
        self._pending.setdefault(group, []).append(warning)
        self._announce("warning", cap, used, group)

    def _announce(self, state: str, cap: Cap, used: int, group: str) -> None:
        if self.events is None:
            return
        dollars = cap.unit is Unit.USD  # dollars as numbers, tokens as whole numbers
        payload = {
            "state": state,
            "scope": cap.scope.value,
            "name": cap.name,
            "unit": cap.unit.value,
            "used": used / MICRO if dollars else used,
            "cap": cap.limit / MICRO if dollars else cap.limit,
            "group": group,
            "at": self.clock().isoformat(),
        }
        self.events.publish(budget_topic(), json.dumps(payload).encode())


class CappedLLM:
    """A provider whose turns are checked against the caps first and whose calls are all
    counted after (a tool step of a turn already begun is not refused)."""

    def __init__(self, inner: LLM, guard: CapGuard, counter: TokenCounter) -> None:
        self.inner = inner
        self.guard = guard
        self.counter = counter
        self.name = inner.name
        self.offline = inner.offline

    def _estimate(self, request: LLMRequest) -> int:
        """A turn's input as its provider will count it: tokens, or words offline."""
        if self.inner.offline:
            return prompt_words(request)
        return prompt_tokens(request, self.counter)

    async def complete(self, request: LLMRequest) -> Completion:
        """Answer ``request`` unless it starts a turn that would pass a cap.

        Raises:
            OverCap: the call was not made.
            LLMError: when the model call fails.
        """
        model = OFFLINE_MODEL if self.inner.offline else request.model
        reservation = await self.guard.admit(
            request.agent.id,
            request.trigger.group,
            model,
            lambda: self._estimate(request),
            continuing=bool(request.exchanges),
        )
        try:
            completion = await self.inner.complete(request)
        except BaseException:
            await asyncio.shield(self._settle(reservation, request, None))
            raise
        await self._settle(reservation, request, completion)
        return completion

    async def _settle(
        self, reservation: Reservation, request: LLMRequest, completion: Completion | None
    ) -> None:
        """Settle the call; the answer stands when Redis fails here (the counters miss it)."""
        try:
            await self.guard.settle(reservation, request, completion)
        except Exception as exc:
            logger.warning("%s: spending not counted: %r", request.agent.id, exc)

    async def aclose(self) -> None:
        """Release the provider's connections."""
        await self.inner.aclose()


async def caps_in_force(
    redis: AsyncConnection, settings: Settings, agents: Sequence[AgentSpec]
) -> tuple[CapLimits, bool]:
    """The caps the running daemon enforces (and ``True``) when it recorded them, else those
    ``settings`` and ``agents`` set (and ``False``)."""
    enforced = await enforced_caps(redis)
    if enforced is not None:
        return enforced, True
    return cap_limits(settings, agents), False


def unpriced_dollar_cap(settings: Settings, agents: Sequence[AgentSpec]) -> ConfigError | None:
    """The error of a dollar cap (shared or an agent's own) while every model is free: it
    could never be reached."""
    limits = cap_limits(settings, agents)
    own = [a.id for a in agents if "usd_per_day" in a.caps]
    shared = [limits.agent_usd, limits.group_usd, limits.all_usd]
    if priced(settings.model_prices) or (not own and all(u is None for u in shared)):
        return None
    where = f"agent {own[0]}: caps.usd_per_day" if own else "a daily dollar cap"
    why = "needs prices: set ARENA_MODEL_PRICES (no model there costs anything)"
    return ConfigError(where, why)


def make_guard(
    settings: Settings,
    redis: AsyncConnection,
    agents: Sequence[AgentSpec],
    events: Announcer,
    metrics: RefusalMetrics | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> CapGuard:
    """The daemon's guard: it counts every call, and checks the caps that are set.

    Raises:
        ConfigError: a dollar cap while no model has a price.
    """
    problem = unpriced_dollar_cap(settings, agents)
    if problem is not None:
        raise problem
    limits = cap_limits(settings, agents)
    prices = {name: Price(**row.model_dump()) for name, row in settings.model_prices.items()}
    return CapGuard(
        ledger=CapLedger(redis, settings.zone),
        limits=limits,
        price=price_table(prices),
        clock=clock,
        events=events,
        metrics=metrics,
    )
