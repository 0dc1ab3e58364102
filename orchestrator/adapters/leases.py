"""Leases in Redis: which daemon owns what, for a limited time, and which daemons are alive.
Every method raises :class:`~orchestrator.errors.BusError` when Redis fails.

A lease is a key holding its owner's consumer name with a time limit. Its owner renews it
well before the limit; a daemon that dies stops renewing, and once the limit passes any other
daemon may take it. The membership set lists the daemons renewing their place in it. Every
step is one Lua script, so two daemons never both take the same lease, and the server's clock
is the only one that counts.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from orchestrator.adapters.redis_client import AsyncConnection, translating
from orchestrator.core.wire import daemon_key, daemons_key, lease_key
from orchestrator.errors import ConfigError

__all__ = ["Leases", "NameTaken"]

# Renew the keys already ours; take free ones until ARGV[3] new ones are taken.
_ACQUIRE = """
local held = {}
local taken = 0
local limit = tonumber(ARGV[3])
for _, key in ipairs(KEYS) do
  local holder = redis.call('GET', key)
  if holder == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    table.insert(held, key)
  elseif not holder and taken < limit then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    taken = taken + 1
    table.insert(held, key)
  end
end
return held
"""

_RELEASE = """
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 0
"""

# Join (ARGV[3] = '1') or leave the membership set; members whose time ran out are dropped.
_MEMBERSHIP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

# Claim a consumer name for this process unless another one holds it (ARGV[3]: a holder
# known to be gone, whose claim may be replaced). Returns the other holder, or false.
_CLAIM_NAME = """
local holder = redis.call('GET', KEYS[1])
if (not holder) or holder == ARGV[1] or holder == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return false
end
return holder
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class NameTaken:
    """Another process runs under this consumer name (``holder``: ``host pid``)."""

    holder: str

    @property
    def here(self) -> bool:
        """Whether that process runs on this machine (and so is known to be alive)."""
        return self.holder.rpartition(" ")[0] == socket.gethostname()


def _process_gone(holder: str) -> bool:
    """Whether ``holder`` (``host pid``) is a process on this machine that no longer runs."""
    host, _, pid_text = holder.rpartition(" ")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True  # an earlier process with our pid (a restarted container)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Leases:
    """One daemon's side of the leases and the membership set."""

    def __init__(self, redis: AsyncConnection, owner: str, ttl_ms: int) -> None:
        if ttl_ms < 100:
            raise ValueError("a lease must last at least 100 ms")
        self.redis = redis
        self.owner = owner
        self.ttl_ms = ttl_ms
        self.me = f"{socket.gethostname()} {os.getpid()}"
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._membership = redis.register_script(_MEMBERSHIP)
        self._claim_name = redis.register_script(_CLAIM_NAME)

    @translating
    async def claim_name(self) -> NameTaken | None:
        """Hold this daemon's consumer name; ``NameTaken`` when another live process has it.

        A holder that is a dead process on this machine is replaced at once; one elsewhere
        only when its claim runs out.
        """
        holder = await self._claim_name(
            keys=[daemon_key(self.owner)], args=[self.me, self.ttl_ms, ""]
        )
        if not holder:
            return None
        other = _text(holder)
        if _process_gone(other):
            again = await self._claim_name(
                keys=[daemon_key(self.owner)], args=[self.me, self.ttl_ms, other]
            )
            if not again:
                return None
            other = _text(again)
        return NameTaken(other)

    @translating
    async def drop_name(self) -> None:
        """Give up the consumer name (on a clean stop)."""
        await self._release(keys=[daemon_key(self.owner)], args=[self.me])

    @translating
    async def members(self, *, join: bool = True) -> list[str]:
        """Renew (or end, ``join=False``) this daemon's membership; the live daemons, sorted."""
        names = await self._membership(
            keys=[daemons_key()], args=[self.owner, self.ttl_ms, "1" if join else "0"]
        )
        return sorted(_text(n) for n in names)

    @translating
    async def acquire(self, names: list[str], *, take: int) -> set[str]:
        """Renew the leases among ``names`` that are ours and take up to ``take`` free ones.

        Returns:
            The names whose leases this daemon holds now.
        """
        if not names:
            return set()
        keys = [lease_key(n) for n in names]
        held = await self._acquire(keys=keys, args=[self.owner, self.ttl_ms, take])
        prefix = len(lease_key(""))
        return {_text(k)[prefix:] for k in held}

    @translating
    async def release(self, names: list[str]) -> None:
        """Give up the leases among ``names`` that are ours."""
        if names:
            await self._release(keys=[lease_key(n) for n in names], args=[self.owner])


def name_taken_error(owner: str, taken: NameTaken) -> ConfigError:
    """The error for a consumer name already in use by another live daemon."""
    return ConfigError(
        "ARENA_CONSUMER",
        f"another daemon runs as {owner!r} ({taken.holder}); give each daemon its own name",
    )
