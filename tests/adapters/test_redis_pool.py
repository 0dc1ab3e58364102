"""The daemon's pool of Redis connections packs its commands with hiredis: the same bytes as
redis-py's own packer, the same refusal of what Redis cannot take, and the commands work."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

from orchestrator.adapters.redis_client import connect_pool

ARGUMENTS: list[tuple[Any, ...]] = [
    ("SET", "key", "value"),
    ("CONFIG GET", "maxmemory"),
    (b"CLIENT SETNAME", "name"),
    ("XADD", "stream", "MAXLEN", "~", 1000, "*", "text", "héllo 👋", "n", 1.5, "raw", b"\x00\xff"),
    ("SET", "big", 10**20),
    ("SET", "views", bytearray(b"ab"), memoryview(b"cd")),
]


def _connection(pool: Any) -> Any:
    """A connection of ``pool``, not connected (redis-py's ``make_connection`` is untyped)."""
    return pool.make_connection()


@pytest.mark.parametrize("args", ARGUMENTS)
@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "unix:///tmp/arena-none.sock"])
def test_commands_are_packed_as_redis_py_packs_them(url: str, args: tuple[Any, ...]) -> None:
    ours = _connection(connect_pool(url, max_connections=2, timeout_s=1).connection_pool)
    theirs = _connection(redis.asyncio.BlockingConnectionPool.from_url(url))
    assert isinstance(ours, type(theirs))
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))


@pytest.mark.parametrize("bad", [None, True, ["a"], {"a": 1}])
def test_what_redis_cannot_take_is_refused_as_redis_py_refuses_it(bad: object) -> None:
    ours = connect_pool("redis://localhost:6379", max_connections=2, timeout_s=1)
    connection = _connection(ours.connection_pool)
    with pytest.raises(redis.DataError):
        connection.pack_command("SET", "key", bad)


def test_commands_run_against_a_real_redis(redis_url: str) -> None:
    async def run() -> list[Any]:
        client = connect_pool(redis_url, max_connections=4, timeout_s=5)
        try:
            await client.set("pool:key", "héllo")
            pipe = client.pipeline(transaction=True)
            pipe.xadd("pool:stream", {"text": "one", "n": 2})
            pipe.xlen("pool:stream")
            pipe.get("pool:key")
            return list(await pipe.execute())
        finally:
            await client.aclose()

    _, length, value = asyncio.run(run())
    assert length == 1
    assert value == "héllo".encode()


def test_each_connection_names_the_library_as_redis_py_does() -> None:
    """Every connection of the pool would tell the server what it is (CLIENT SETINFO, on
    Redis 7.2 and later) as redis-py's own connections do."""
    url = "redis://localhost:6379"
    ours = connect_pool(url, max_connections=2, timeout_s=1).connection_pool
    theirs = redis.asyncio.BlockingConnectionPool.from_url(url)
    first, second = ours.make_connection(), ours.make_connection()  # type: ignore[attr-defined]
    plain = theirs.make_connection()
    for connection in (first, second):
        info = getattr(connection, "driver_info", None)
        expected = getattr(plain, "driver_info", None)
        assert (info and info.formatted_name) == (expected and expected.formatted_name)
        assert (info and info.lib_version) == (expected and expected.lib_version)
