"""The caps' ledger: each day's token and dollar counters in Redis, shared by every daemon.

One hash per day (in ``ARENA_TZ``) holds counters named ``{unit}:{scope}:{name}``
(``tokens:group:demo``, ``usd:agent:architect``, ``tokens:model:claude-sonnet-4-5``,
``tokens:all:*``; dollars as micro-dollars) and, as ``warned:{counter}``, the caps already
warned about that day (``warned:full:{counter}``: told used up). It expires eight days after
its last write.

A call first *reserves* its estimate: one Lua script compares every cap's counter plus the
estimate with its limit and adds the estimate to all or to none, so two daemons never both
take the last of a cap (the script applies :func:`orchestrator.caps.limits.check`'s rule, which
then names the cap that refused). After the call the reservation
is *settled*: the estimate is taken back and what the model reported is added.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from orchestrator.adapters.redis_client import (
    AsyncConnection,
    Connection,
    translated,
    translating,
)
from orchestrator.caps.limits import Breach, Cap, CapLimits, Unit, check, day_of
from orchestrator.core.quick_init import quick_init
from orchestrator.core.wire import caps_key, daemons_key, spend_key

__all__ = [
    "CapLedger",
    "Reservation",
    "Spent",
    "enforced_caps",
    "publish_caps",
    "read_days",
    "read_enforced_caps",
]

logger = logging.getLogger(__name__)

TTL_S = 8 * 24 * 3600
FLUSH_INTERVAL_S = 0.5

# Reserve atomically: ARGV = ttl, then (counter, limit, amount) per cap. When any cap would
# pass (the rule of ``orchestrator.caps.limits.check``), nothing is added and the day's
# counters are returned as a flat list after the word ``refused``; else every amount is added
# and an empty list returned.
_RESERVE = """
local key = KEYS[1]
for i = 2, #ARGV, 3 do
  local used = tonumber(redis.call('HGET', key, ARGV[i]) or '0')
  local limit = tonumber(ARGV[i + 1])
  if used >= limit or used + tonumber(ARGV[i + 2]) > limit then
    local seen = redis.call('HGETALL', key)
    table.insert(seen, 1, 'refused')
    return seen
  end
end
for i = 2, #ARGV, 3 do
  redis.call('HINCRBY', key, ARGV[i], ARGV[i + 2])
end
redis.call('EXPIRE', key, ARGV[1])
return {}
"""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    """An estimate taken from today's caps until the call is settled."""

    day: str
    amounts: Mapping[str, int]  # counter -> reserved amount


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Spent:
    """What one model call cost: by whom, where, on which model."""

    agent: str
    group: str
    model: str
    tokens: int
    micro_usd: int

    def amounts(self) -> dict[str, int]:
        """The counters this call adds to."""
        amounts: dict[str, int] = {}
        for scope, name in (("agent", self.agent), ("group", self.group), ("all", "*")):
            amounts[f"tokens:{scope}:{name}"] = self.tokens
            amounts[f"usd:{scope}:{name}"] = self.micro_usd
        amounts[f"tokens:model:{self.model}"] = self.tokens
        amounts[f"usd:model:{self.model}"] = self.micro_usd
        return amounts


def _decode(raw: Mapping[bytes | str, bytes | str]) -> dict[str, int]:
    counters: dict[str, int] = {}
    for field, value in raw.items():
        name = field.decode() if isinstance(field, bytes) else field
        if not name.startswith("warned:"):
            counters[name] = int(value)
    return counters


class CapLedger:
    """Today's counters for the daemon: reserve, settle, warn once."""

    def __init__(
        self, redis: AsyncConnection, zone: ZoneInfo, *, interval_s: float = FLUSH_INTERVAL_S
    ) -> None:
        self.redis = redis
        self.zone = zone
        self.interval_s = interval_s
        self._reserve = redis.register_script(_RESERVE)
        self._later: dict[str, dict[str, int]] = {}  # day -> counter -> amount
        self._flusher: asyncio.Task[None] | None = None

    def _day(self, now: datetime) -> str:
        return day_of(now, self.zone).isoformat()

    def unchecked(self, now: datetime) -> Reservation:
        """A reservation of nothing, for a call no cap applies to (only counted after it)."""
        return Reservation(day=self._day(now), amounts={})

    @translating
    async def reserve(
        self, caps: tuple[Cap, ...], estimate: Mapping[Unit, int], now: datetime
    ) -> Reservation | Breach:
        """Take ``estimate`` from every cap in ``caps`` at once, or none when one would pass.

        Returns:
            The reservation to settle, or the breach that refused it.
        """
        day = self._day(now)
        if not caps:  # nothing to check: the call is only counted
            return self.unchecked(now)
        amounts = {c.key: estimate.get(c.unit, 0) for c in caps}
        args: list[str | int] = [TTL_S]
        for cap in caps:
            args += [cap.key, cap.limit, amounts[cap.key]]
        refused = await self._reserve(keys=[spend_key(day)], args=args)
        if not refused:
            return Reservation(day=day, amounts=amounts)
        # Refused: the pure rule names the cap and when it resets, from the counters Redis saw.
        flat = refused[1:]
        used = _decode(dict(zip(flat[::2], flat[1::2], strict=True)))
        breach = check(caps, used, estimate, now.astimezone(self.zone))
        if breach is None:  # the script and the rule disagree: a bug, never a silent overspend
            raise RuntimeError(f"spend counters of {day}: a cap refused the call, none passed")
        return breach

    @translating
    async def settle(
        self, reservation: Reservation, spent: Spent | None, watched: Sequence[str] = ()
    ) -> dict[str, int]:
        """Take the reservation back and add what the call cost (nothing when it failed).

        Returns:
            The ``watched`` counters of the reserved day afterwards.
        """
        key = spend_key(reservation.day)
        delta = {k: -v for k, v in reservation.amounts.items()}
        for counter, amount in (spent.amounts() if spent is not None else {}).items():
            delta[counter] = delta.get(counter, 0) + amount
        pipe = self.redis.pipeline(transaction=False)
        for counter, amount in delta.items():
            if amount:
                pipe.hincrby(key, counter, amount)
        pipe.expire(key, TTL_S)
        if watched:
            pipe.hmget(key, list(watched))
        results = await pipe.execute()
        if not watched:
            return {}
        return {k: int(v or 0) for k, v in zip(watched, results[-1], strict=True)}

    def count_later(self, day: str, spent: Spent) -> None:
        """Add a call no cap applies to within the next half second, with the others of that
        time in one round trip (off the path of the reply)."""
        counters = self._later.setdefault(day, {})
        for counter, amount in spent.amounts().items():
            counters[counter] = counters.get(counter, 0) + amount
        if self._flusher is None:
            self._flusher = asyncio.create_task(
                self._flush_soon(), name="orchestrator.caps.ledger.flush"
            )

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self.interval_s)
        self._flusher = None
        await self.flush()

    async def flush(self) -> None:
        """Write what :meth:`count_later` was given (lost, with a WARNING, if Redis fails)."""
        later, self._later = self._later, {}
        if not later:
            return
        pipe = self.redis.pipeline(transaction=False)
        for day, counters in later.items():
            for counter, amount in counters.items():
                pipe.hincrby(spend_key(day), counter, amount)
            pipe.expire(spend_key(day), TTL_S)
        try:
            await pipe.execute()
        except Exception as exc:  # spending is never worth failing a reply for
            logger.warning("spending of %d days not counted: %r", len(later), exc)

    async def aclose(self) -> None:
        """Write what is left to count."""
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        await self.flush()

    @translating
    async def read_days(self, now: datetime, days: int) -> list[tuple[date, dict[str, int]]]:
        """The counters of the last ``days`` days (today first)."""
        wanted = _days(now, self.zone, days)
        pipe = self.redis.pipeline(transaction=False)
        for day in wanted:
            pipe.hgetall(spend_key(day.isoformat()))
        return [(day, _decode(raw)) for day, raw in zip(wanted, await pipe.execute(), strict=True)]

    @translating
    async def claim_warning(self, day: str, cap: Cap, *, full: bool = False) -> bool:
        """Whether this is the first warning about ``cap`` on ``day`` (then it is recorded);
        ``full``: the first that it is used up, claimed apart from the 80 % one."""
        field = f"warned:full:{cap.key}" if full else f"warned:{cap.key}"
        return bool(await self.redis.hsetnx(spend_key(day), field, 1))


def read_days(
    redis: Connection, zone: ZoneInfo, now: datetime, days: int
) -> list[tuple[date, dict[str, int]]]:
    """The counters of the last ``days`` days (today first), for ``arena budget``."""
    wanted = _days(now, zone, days)
    pipe = redis.pipeline(transaction=False)
    for day in wanted:
        pipe.hgetall(spend_key(day.isoformat()))
    with translated():
        counters = pipe.execute()
    return [(day, _decode(raw)) for day, raw in zip(wanted, counters, strict=True)]


def _days(now: datetime, zone: ZoneInfo, days: int) -> list[date]:
    today = day_of(now, zone)
    return [today - timedelta(days=n) for n in range(days)]


# The caps the last daemon started enforces, while any daemon is live (its membership in
# ``daemons_key`` not run out by Redis' clock); else nothing.
_ENFORCED = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if redis.call('ZCOUNT', KEYS[2], now_ms, '+inf') == 0 then
  return false
end
return redis.call('GET', KEYS[1])
"""


@translating
async def publish_caps(redis: AsyncConnection, limits: CapLimits) -> None:
    """Record the caps this daemon enforces (each daemon start overwrites them)."""
    await redis.set(caps_key(), limits.as_json())


def _parse_caps(raw: bytes | str | None) -> CapLimits | None:
    if raw is None:
        return None
    try:
        return CapLimits.from_json(raw)
    except ValueError as exc:  # written by another version, or by hand: fall back to ours
        logger.warning("ignoring the recorded caps (%s): %s", caps_key(), exc)
        return None


@translating
async def enforced_caps(redis: AsyncConnection) -> CapLimits | None:
    """The caps the running daemons enforce (None: no daemon is running, or none recorded)."""
    script = redis.register_script(_ENFORCED)
    return _parse_caps(await script(keys=[caps_key(), daemons_key()]))


def read_enforced_caps(redis: Connection) -> CapLimits | None:
    """:func:`enforced_caps` for ``arena budget``."""
    script = redis.register_script(_ENFORCED)
    with translated():
        recorded = script(keys=[caps_key(), daemons_key()])
    return _parse_caps(recorded)
