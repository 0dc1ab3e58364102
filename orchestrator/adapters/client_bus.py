"""The blocking client's side of the Redis streams (:class:`orchestrator.client.ArenaClient`,
so ``arena post``, ``tail``, ``chat``, ``retry`` and the console's posts): the inbox it posts
to, the outbound streams it follows (and the runs' steps streams beside them), the dead letters
it lists and posts again.

Every method raises :class:`~orchestrator.errors.BusError` worded for people (what is wrong,
and how to start the Redis), never redis-py's errors; :class:`~orchestrator.errors.BusUnavailable`
when Redis did not answer and may answer again (a refused password is not that).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import redis

from orchestrator.adapters.probes import redis_problem
from orchestrator.core.coding import Seen, Step, in_order, steps_stream
from orchestrator.core.wire import (
    Outbound,
    deadletter_stream,
    inbox_stream,
    outbox_stream,
    team_key,
)
from orchestrator.errors import BusError, BusUnavailable, ConfigError

__all__ = ["ClientBus"]

CONNECT_TIMEOUT_S = 5.0
# A read that gets no answer at all in this long (a server that stopped answering on a
# connection it kept open) fails as Redis unavailable, instead of waiting for ever; a blocking
# read is kept well under it.
READ_TIMEOUT_S = 10.0
_MOST_BLOCK_MS = 10_000
_BATCH = 100  # entries of each stream per read, when following the steps too


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


class ClientBus:
    """One blocking connection pool to the Redis at ``url``; ``hint`` says how to start it."""

    def __init__(self, url: str, hint: str = "", *, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        """Raises:
        ConfigError: the URL is not valid."""
        self.url = url
        self._hint = hint
        self._most_block_ms = min(_MOST_BLOCK_MS, int(read_timeout_s * 1000 / 3))
        try:
            self._redis = redis.Redis.from_url(
                url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=read_timeout_s
            )
        except ValueError as exc:  # a port that is not a number, a bad query argument, ...
            # redis-py's text may quote the URL: never show it.
            problem = f"not a valid Redis URL ({exc.__class__.__name__})"
            raise ConfigError("REDIS_URL", problem) from None

    def close(self) -> None:
        """Close the connections."""
        self._redis.close()

    def _fail(self, exc: redis.RedisError) -> BusError:
        problem, hint = redis_problem(self.url, exc, CONNECT_TIMEOUT_S)
        auth = isinstance(exc, redis.AuthenticationError)
        hint = hint if auth or not self._hint else self._hint
        kind = type(exc).__name__
        if isinstance(exc, redis.ConnectionError | redis.TimeoutError) and not auth:
            return BusUnavailable(problem, hint, kind=kind)
        return BusError(problem, hint, kind=kind)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise self._fail(exc) from None

    def ping(self) -> None:
        """Check that Redis answers."""
        with self._translated():
            self._redis.ping()

    def newest_id(self, group: str) -> str:
        """The id of the newest entry on the group's outbound stream (``0-0`` if none)."""
        with self._translated():
            newest = cast(list[Any], self._redis.xrevrange(outbox_stream(group), count=1))
        return _text(newest[0][0]) if newest else "0-0"

    def newest_step_id(self, group: str) -> str:
        """The id of the newest step of the group's runs (``0-0`` if none)."""
        with self._translated():
            newest = cast(list[Any], self._redis.xrevrange(steps_stream(group), count=1))
        return _text(newest[0][0]) if newest else "0-0"

    def team(self) -> set[str]:
        """The ids and names of the agents the last daemon started answers as."""
        with self._translated():
            names = cast(set[bytes], self._redis.smembers(team_key()))
        return {_text(name) for name in names}

    def post(self, group: str, text: str, sender: str) -> str:
        """Append a message to the inbox; its id (the stream entry id)."""
        fields: dict[Any, Any] = {"group": group, "text": text, "sender": sender}
        with self._translated():
            entry_id = cast(bytes, self._redis.xadd(inbox_stream(), fields))
        return _text(entry_id)

    def wait_after(self, group: str, after: str, block_ms: int) -> list[tuple[str, Outbound]]:
        """The group's outbound items after entry ``after``, waiting up to ``block_ms`` for
        the first (none when none came)."""
        with self._translated():
            block = min(block_ms, self._most_block_ms) if block_ms > 0 else self._most_block_ms
            response = self._redis.xread({outbox_stream(group): after}, block=block) or []
        return [
            (_text(entry_id), Outbound.from_fields({_text(k): _text(v) for k, v in fields.items()}))
            for _stream, items in cast(list[Any], response)
            for entry_id, fields in items
        ]

    def wait_both(self, group: str, after: str, steps_after: str, block_ms: int) -> list[Seen]:
        """The group's outbound items after entry ``after`` and its runs' steps after
        ``steps_after``, read in one ``XREAD`` waiting up to ``block_ms`` for the first; in
        the order Redis added them."""
        outbox, steps = outbox_stream(group), steps_stream(group)
        streams: dict[Any, Any] = {outbox: after, steps: steps_after}
        with self._translated():
            block = min(block_ms, self._most_block_ms) if block_ms > 0 else self._most_block_ms
            response = self._redis.xread(streams, count=_BATCH, block=block) or []
        posted: list[tuple[str, Outbound]] = []
        stepped: list[tuple[str, Step]] = []
        for name, items in cast(list[Any], response):
            for entry_id, fields in items:
                decoded = {_text(k): _text(v) for k, v in fields.items()}
                if _text(name) == steps:
                    stepped.append((_text(entry_id), Step.from_fields(decoded)))
                else:
                    posted.append((_text(entry_id), Outbound.from_fields(decoded)))
        return in_order(posted, stepped, _BATCH)

    def dead_letters(self, limit: int) -> list[dict[str, str]]:
        """The newest ``limit`` dead letters, oldest first: id, entry_id, reason and the
        original fields (``group``, ``sender``, ``text`` when they were readable)."""
        with self._translated():
            rows = self._redis.xrevrange(deadletter_stream(), count=limit)
        letters = []
        for entry_id, fields in reversed(cast(list[Any], rows)):
            letter = {"id": _text(entry_id)}
            for name, value in fields.items():
                letter[_text(name).removeprefix("field:")] = _text(value)
            letters.append(letter)
        return letters

    def dead_letter(self, letter_id: str) -> dict[str, bytes] | None:
        """The fields of the dead letter ``letter_id`` (posted ones without ``field:``), or
        None when there is none."""
        with self._translated():
            rows = cast(list[Any], self._redis.xrange(deadletter_stream(), letter_id, letter_id))
        if not rows:
            return None
        return {_text(k).removeprefix("field:"): v for k, v in rows[0][1].items()}

    def drop_dead_letter(self, letter_id: str) -> None:
        """Remove the dead letter ``letter_id`` (it was posted again)."""
        with self._translated():
            self._redis.xdel(deadletter_stream(), letter_id)
