"""The Python client: post a message to a group and read its replies, through Redis.

from orchestrator.client import ArenaClient
with ArenaClient() as arena:  # where the settings say; or ArenaClient("redis://host:6379/0")
    message_id = arena.post("demo", "@architect please design the token schema")
    for reply in arena.replies("demo", message_id, timeout_s=30):
        print(reply.sender, reply.text)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import overload

from orchestrator.adapters.client_bus import ClientBus
from orchestrator.adapters.probes import START_REDIS_HINT
from orchestrator.adapters.urls import check_tls_files
from orchestrator.core.coding import Step
from orchestrator.core.wire import (
    DEFAULT_SENDER,
    Outbound,
    validate_person,
    validate_post,
)
from orchestrator.errors import BusError, BusUnavailable, ValidationError
from orchestrator.settings import Settings, load_settings

__all__ = ["ArenaClient"]

EMBEDDED_HINT = START_REDIS_HINT
_OUTAGE_POLL_S = 1.0  # how often `follow` tries a Redis that does not answer


class ArenaClient:
    """Posts messages and follows replies. Blocking; one Redis connection pool."""

    def __init__(
        self, redis_url: str | None = None, *, max_message_bytes: int = 32 * 1024, hint: str = ""
    ) -> None:
        """Connect to ``redis_url``; without one, to where the settings (the environment) say:
        ``REDIS_URL``, else the embedded Redis of ``arena up`` (its TCP port, or its socket).

        Raises:
            ConfigError: the URL, or a setting, is not valid.
        """
        if redis_url is None:
            settings = load_settings()
            redis_url = settings.public_redis_url
            hint = hint or ("" if settings.redis_url else EMBEDDED_HINT)
        self.redis_url = redis_url
        self.max_message_bytes = max_message_bytes
        check_tls_files("REDIS_URL", redis_url)
        self._bus = ClientBus(redis_url, hint)

    @classmethod
    def from_settings(cls, settings: Settings) -> ArenaClient:
        """A client for the configured Redis (or the embedded one under the data folder)."""
        hint = "" if settings.redis_url else EMBEDDED_HINT
        return cls(
            settings.effective_redis_url, max_message_bytes=settings.max_message_bytes, hint=hint
        )

    def __enter__(self) -> ArenaClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._bus.close()

    def ping(self) -> None:
        """Check that Redis answers.

        Raises:
            BusError: with a hint on how to start it.
        """
        self._bus.ping()

    def last_reply_id(self, group: str) -> str:
        """The id of the newest entry on the group's outbound stream (``0-0`` if none)."""
        return self._bus.newest_id(group)

    def last_step_id(self, group: str) -> str:
        """The id of the newest step of the group's runs (``0-0`` if none)."""
        return self._bus.newest_step_id(group)

    def post(self, group: str, text: str, sender: str = DEFAULT_SENDER) -> str:
        """Validate and post a message; returns its id (the stream entry id).

        The sender must be a person's: not a reserved name, nor the id or name of an agent
        of the team the running daemon answers as (the daemon refuses those too).

        Raises:
            ValidationError: when the group, text or sender is not acceptable.
            BusError: when Redis cannot be reached.
        """
        post = validate_post(group, text, sender, self.max_message_bytes)
        validate_person(post.sender, self._bus.team())
        return self._bus.post(post.group, post.text, post.sender)

    @overload
    def follow(
        self,
        group: str,
        after: str = "$",
        block_ms: int = 1000,
        *,
        outage: Callable[[BusError | None], None] | None = None,
        steps: None = None,
    ) -> Iterator[Outbound | None]: ...

    @overload
    def follow(
        self,
        group: str,
        after: str = "$",
        block_ms: int = 1000,
        *,
        outage: Callable[[BusError | None], None] | None = None,
        steps: str,
    ) -> Iterator[Outbound | Step | None]: ...

    def follow(
        self,
        group: str,
        after: str = "$",
        block_ms: int = 1000,
        *,
        outage: Callable[[BusError | None], None] | None = None,
        steps: str | None = None,
    ) -> Iterator[Outbound | Step | None]:
        """Yield the group's outbound items as they arrive (``None`` on every idle poll).

        Args:
            group: the group to follow.
            after: the stream entry id to follow from (``$``: what comes next).
            block_ms: how long one poll waits.
            outage: when given, Redis not answering does not end the following: ``outage`` is
                called with the problem once, then with None once Redis answers again, and
                the following goes on where it was (nothing published meanwhile is missed).
            steps: when given, the steps of the group's runs are yielded too, as
                :class:`~orchestrator.core.coding.Step` items between the outbound ones, in
                the order they happened: from after this steps stream entry id (``$``: what
                comes next). Without it, only outbound items come.
        """
        last = self.last_reply_id(group) if after == "$" else after
        last_step = self.last_step_id(group) if steps == "$" else steps
        down = False
        while True:
            response = self._poll(group, last, last_step, block_ms, resume=outage is not None)
            if isinstance(response, BusError):
                if not down and outage is not None:
                    outage(response)
                down = True
                time.sleep(_OUTAGE_POLL_S)
                yield None
                continue
            if down and outage is not None:
                outage(None)
            down = False
            for entry_id, item in response:
                if isinstance(item, Step):  # the next poll reads after it
                    last_step = entry_id
                else:
                    last = entry_id
                yield item
            if not response:
                yield None

    def _poll(
        self, group: str, last: str, last_step: str | None, block_ms: int, *, resume: bool
    ) -> Sequence[tuple[str, Outbound | Step]] | BusError:
        """One read of the group's outbox after ``last`` (and its steps after ``last_step``,
        when given): its entries (``[]`` if none came); when ``resume``, a Redis that does
        not answer is returned as the error, not raised."""
        try:
            if last_step is None:
                return self._bus.wait_after(group, last, block_ms)
            return self._bus.wait_both(group, last, last_step, block_ms)
        except BusUnavailable as exc:
            if resume:
                return exc
            raise

    def replies(
        self, group: str, message_id: str, timeout_s: float, *, after: str = "0-0"
    ) -> Iterator[Outbound]:
        """Yield the replies to ``message_id`` until its ``done`` item, or until the timeout.

        Raises:
            TimeoutError: when the replies are not complete within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        for item in self.follow(group, after=after, block_ms=200):
            if item is not None and item.in_reply_to == message_id:
                if item.type == "done":
                    return
                yield item
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete answer to {message_id} within {timeout_s:g}s")

    def dead_letters(self, limit: int = 100) -> list[dict[str, str]]:
        """The newest ``limit`` dead letters, oldest first: id, entry_id, reason and the
        original fields (``group``, ``sender``, ``text`` when they were readable)."""
        return self._bus.dead_letters(limit)

    def retry(self, dead_letter_id: str) -> str:
        """Post a dead letter's message again (a new message id) and remove the dead letter.

        Raises:
            ValidationError: when there is no such dead letter, or its fields cannot be posted.
        """
        fields = self._bus.dead_letter(dead_letter_id)
        if fields is None:
            raise ValidationError("id", f"no dead letter {dead_letter_id!r} (`arena dead-letters`)")
        try:
            group, text = fields["group"].decode(), fields["text"].decode()
            sender = fields.get("sender", DEFAULT_SENDER.encode()).decode()
        except (KeyError, UnicodeDecodeError):
            raise ValidationError(
                "id", f"dead letter {dead_letter_id} has no postable message"
            ) from None
        message_id = self.post(group, text, sender)
        self._bus.drop_dead_letter(dead_letter_id)
        return message_id

    def post_and_wait(
        self, group: str, text: str, sender: str = DEFAULT_SENDER, timeout_s: float = 60.0
    ) -> tuple[str, list[Outbound]]:
        """Post a message and wait for every reply to it."""
        after = self.last_reply_id(group)
        message_id = self.post(group, text, sender)
        return message_id, list(self.replies(group, message_id, timeout_s, after=after))
