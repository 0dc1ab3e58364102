"""Who may publish what on the embedded broker: two ``amqtt`` plugins that
:class:`~orchestrator.adapters.mqtt_broker.MqttBroker` has the broker load by name.

A client that gives no user name is let in anonymously: it may subscribe to anything, and
publish anywhere but on the arena's topics (``arena`` and ``arena/...``), its last will
included. A client that gives a user name must be the arena's, with the arena's password. So
only the arena publishes on its topics, and no other local process can make up an agent's
reply for the subscribers to read.

Imported by ``amqtt`` when the broker starts (only ``arena up`` runs one), never by the rest.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from amqtt.contexts import Action
from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
from amqtt.session import Session

__all__ = ["ArenaLogin", "ArenaTopics", "is_arena_topic"]

_ROOT = "arena"


def is_arena_topic(topic: str) -> bool:
    """Whether ``topic`` is one of the arena's (``arena`` or below ``arena/``)."""
    return topic == _ROOT or topic.startswith(f"{_ROOT}/")


class ArenaLogin(BaseAuthPlugin):  # type: ignore[misc]  # amqtt ships no type hints
    """Lets in anonymous clients, whose last will is not on the arena's topics, and the
    arena's own login; refuses any other user name or a wrong password."""

    @dataclass
    class Config:
        """The arena's login."""

        username: str
        password: str

    async def authenticate(self, *, session: Session) -> bool:
        """Whether the client may connect."""
        if session.username is None:
            return not (session.will_flag and is_arena_topic(session.will_topic or ""))
        given = (session.password or "").encode("utf-8")
        return session.username == self.config.username and hmac.compare_digest(
            given, self.config.password.encode("utf-8")
        )


class ArenaTopics(BaseTopicPlugin):  # type: ignore[misc]  # amqtt ships no type hints
    """Refuses a publish on the arena's topics by anyone but the arena's login; everything
    else (subscribing, receiving, other topics) is allowed."""

    @dataclass
    class Config:
        """The user name the arena publishes under."""

        username: str

    async def topic_filtering(
        self,
        *,
        session: Session | None = None,
        topic: str | None = None,
        action: Action | None = None,
    ) -> bool:
        """Whether ``session`` may do ``action`` on ``topic``."""
        if action is not Action.PUBLISH or topic is None or not is_arena_topic(topic):
            return True
        return session is not None and session.username == self.config.username
