"""The package's one door to redis-py: the connections the rest of the package holds, and
redis-py's errors turned into the package's own at this edge.

Every adapter that talks to Redis runs its commands under :func:`translated`, so the layers
above catch :class:`~orchestrator.errors.BusUnavailable` (Redis did not answer: try again) and
:class:`~orchestrator.errors.BusError` (any other failed command), never ``redis.RedisError``.
They hold a connection as :data:`AsyncConnection` or :data:`Connection` (made here) and hand it
to the adapters that use it; they call no command on it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeAlias, TypeVar

import hiredis
import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from orchestrator.errors import BusError, BusUnavailable

__all__ = [
    "AsyncConnection",
    "Connection",
    "ScriptUnknown",
    "bus_error",
    "connect",
    "connect_async",
    "connect_patient",
    "connect_pool",
    "translated",
    "translating",
]

ScriptUnknown = redis.exceptions.NoScriptError
"""What a script called by its digest raises when the server does not hold it (restarted,
flushed): load it and call it again."""

P = ParamSpec("P")
T = TypeVar("T")

AsyncConnection: TypeAlias = redis.asyncio.Redis
"""An asyncio connection pool to one Redis (the daemon's, the console's)."""

Connection: TypeAlias = redis.Redis
"""A blocking connection pool to one Redis (RQ's, the commands')."""


def bus_error(exc: redis.RedisError) -> BusError:
    """The package's error for redis-py's ``exc``: :class:`BusUnavailable` when Redis did
    not answer (a refused password included: it is a connection that failed), else
    :class:`BusError`. Its ``problem`` is redis-py's text, its ``kind`` redis-py's name."""
    kind = type(exc).__name__
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return BusUnavailable(str(exc), kind=kind)
    return BusError(str(exc), kind=kind)


@contextmanager
def translated() -> Iterator[None]:
    """Run Redis commands; redis-py's errors leave as :func:`bus_error` says (the original
    kept as ``__cause__``)."""
    try:
        yield
    except redis.RedisError as exc:
        raise bus_error(exc) from exc


def translating(func: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """``func`` (a coroutine function sending Redis commands) run under :func:`translated`."""

    @functools.wraps(func)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with translated():
            return await func(*args, **kwargs)

    return run


def connect(url: str, **options: Any) -> Connection:
    """A blocking connection pool to the Redis at ``url`` (nothing is sent yet).

    Raises:
        ValueError: the URL is malformed (redis-py's own check).
    """
    return redis.Redis.from_url(url, **options)


def connect_patient(url: str) -> Connection:
    """A blocking connection pool whose commands wait for a Redis that is away, trying again
    at least once a second, instead of failing (an RQ worker's: it has nothing to do without
    Redis). Otherwise redis-py gives up after ten attempts (within about 5 s), and RQ ends
    the worker on the first error it cannot handle; after a Redis restart that took a little
    longer no job would run again."""
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=-1)
    return redis.Redis.from_url(url, retry=retry)


def connect_async(url: str, **options: Any) -> AsyncConnection:
    """An asyncio connection pool to the Redis at ``url`` (nothing is sent yet).

    Raises:
        ValueError: the URL is malformed (redis-py's own check).
    """
    return redis.asyncio.Redis.from_url(url, **options)


def connect_pool(url: str, *, max_connections: int, timeout_s: float) -> AsyncConnection:
    """The daemon's pool: at most ``max_connections``; a command waits (up to ``timeout_s``)
    for a free connection rather than fail when every one is busy (hundreds of groups in
    flight at once)."""
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        **_DRIVER_INFO,
    )
    pool.connection_class = _packed_by_hiredis(pool.connection_class)
    return redis.asyncio.Redis.from_pool(pool)


# What each new connection tells the server it is (CLIENT SETINFO), made once: redis-py makes it
# again for every connection, reading its own version from the installed package's metadata
# (0.65 ms each; hundreds of groups at once grow the pool by tens of connections).
try:
    from redis.driver_info import DriverInfo

    _DRIVER_INFO: dict[str, Any] = {"driver_info": DriverInfo()}
except ImportError:  # redis-py before 7: its own way, once per connection
    _DRIVER_INFO = {}

_Connection: TypeAlias = type[redis.asyncio.connection.AbstractConnection]
_PACKED: dict[str, _Connection] = {}


def _packed_by_hiredis(base: _Connection) -> _Connection:
    """``base`` packing its commands with hiredis, in C, as redis-py's blocking connections
    do: its asyncio connections pack them in Python, which took a few percent of the daemon's
    CPU (a reply's publication is one command of many arguments)."""

    def pack_command(self: Any, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:  # hiredis takes bytes, not their views
            args = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args)
        try:
            return [hiredis.pack_command(args)]
        except (TypeError, UnicodeError) as exc:
            raise redis.DataError(str(exc)) from exc

    name = f"Hiredis{base.__name__}"
    if name not in _PACKED:  # one class for each of redis-py's (TCP, TLS, Unix socket)
        _PACKED[name] = type(name, (base,), {"pack_command": pack_command})
    return _PACKED[name]
