"""Microsoft Agent Framework's group chat (``GroupChatBuilder``) as a peer of
``tests/bench/peers.py``.

One workflow per group with our four agents (``Agent`` with our ids, descriptions and
``CLAUDE.md`` + ``SOUL.md`` as instructions); each message is one ``workflow.run(text)`` that
stops after one agent reply (a termination condition that holds once the conversation has grown
past what the run was given). The workflow keeps what its runs saw (its orchestrator's
conversation, each agent's session). The next speaker is chosen two ways:

* ``selection``: a selection function that picks the mentioned agent;
* ``manager``: a manager agent (``orchestrator_agent``) whose zero-latency model names the
  mentioned agent in the JSON the orchestrator asks for: one more model call per message.

The model is a zero-latency chat client: a ``BaseChatClient`` with the layers every shipped
client has (function invocation, middleware, telemetry, off unless configured) that answers a
fixed short reply at once, or the manager's JSON.

Prior messages (``--realistic``) are given with a group's first message, as the run's input
list (the framework stores no message without a run): the orchestrator adds them to its
conversation and sends them to every agent before it asks the mentioned one.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Literal

from tests.bench.peer_workload import REPLY, Calls, Persona, Prior, TeamFactory, mentioned

try:
    from agent_framework import (
        Agent,
        BaseChatClient,
        ChatMiddlewareLayer,
        ChatResponse,
        FunctionInvocationLayer,
        Message,
        Workflow,
    )
    from agent_framework.observability import ChatTelemetryLayer
    from agent_framework_orchestrations import (
        GroupChatBuilder,
        GroupChatResponseReceivedEvent,
        GroupChatState,
    )
except ModuleNotFoundError as exc:  # the optional `bench` extra is not installed
    if not (exc.name or "").startswith("agent_framework"):
        raise
    AVAILABLE = False
else:
    AVAILABLE = True

__all__ = ["AVAILABLE", "DISTRIBUTION", "factory"]

DISTRIBUTION = "agent-framework-orchestrations"
Mode = Literal["selection", "manager"]
MANAGER = "manager"


if AVAILABLE:

    class RawInstantClient(BaseChatClient):
        """A model that answers at once: ``REPLY``, or (with ``names``) the manager's decision
        naming the agent the latest ``@name`` mentions."""

        def __init__(self, *, calls: Calls, names: Sequence[str] = ()) -> None:
            super().__init__()
            self._calls = calls
            self._names = list(names)

        async def _answer(self, messages: Sequence[Message]) -> ChatResponse:
            text = REPLY
            if self._names:
                self._calls.selector += 1
                self._calls.selector_prompt_chars += sum(len(m.text) for m in messages)
                # The prompt ends with the orchestrator's instruction: the latest message with
                # a mention comes before it.
                said = [m.text for m in messages if "@" in m.text]
                decision = {
                    "terminate": False,
                    "reason": "the message mentions this agent",
                    "next_speaker": mentioned(said[-1] if said else "", self._names),
                    "final_message": None,
                }
                text = json.dumps(decision)
            else:
                self._calls.agent += 1
            return ChatResponse(messages=[Message(role="assistant", contents=[text])])

        def _inner_get_response(
            self,
            *,
            messages: Sequence[Message],
            stream: bool,
            options: Mapping[str, Any],
            **kwargs: Any,
        ) -> Awaitable[ChatResponse]:
            if stream:
                raise NotImplementedError("the bench runs without streaming")
            return self._answer(messages)

    class InstantClient(
        FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer, RawInstantClient
    ):
        """The instant model with the layers of every shipped client."""

    class MafTeam:
        """One group's group-chat workflow."""

        def __init__(self, mode: Mode, personas: Sequence[Persona], calls: Calls) -> None:
            names = [p.id for p in personas]
            client = InstantClient(calls=calls)
            agents = [
                Agent(client, p.system_message, name=p.id, description=p.description)
                for p in personas
            ]
            self._given: int | None = None
            if mode == "selection":

                def select(state: GroupChatState) -> str:
                    return mentioned(state.conversation[-1].text, names)

                builder = GroupChatBuilder(
                    participants=agents, selection_func=select, termination_condition=self._done
                )
            else:
                manager = Agent(
                    InstantClient(calls=calls, names=names),
                    "You coordinate the team: the agent a message mentions answers it.",
                    name=MANAGER,
                    description="picks who answers",
                )
                builder = GroupChatBuilder(
                    participants=agents,
                    orchestrator_agent=manager,
                    termination_condition=self._done,
                )
            self._workflow: Workflow = builder.build()

        def _done(self, conversation: list[Message]) -> bool:
            """Whether an agent has answered in this run: the first check of a run sees what it
            was given; any message after that is the reply."""
            if self._given is None:
                self._given = len(conversation)
                return False
            return len(conversation) > self._given

        async def _run(self, given: str | list[Message]) -> list[str]:
            self._given = None
            result = await self._workflow.run(given)
            return [
                e.data.participant_name
                for e in result
                if isinstance(e.data, GroupChatResponseReceivedEvent)
            ]

        async def ask(self, text: str, prior: Sequence[Prior] = ()) -> str:
            given: str | list[Message] = text
            if prior:
                given = [
                    Message(
                        role="assistant" if p.agent else "user",
                        author_name=p.sender,
                        contents=[p.text],
                    )
                    for p in prior
                ]
                given.append(Message(role="user", contents=[text]))
            repliers = await self._run(given)
            if len(repliers) != 1:
                raise RuntimeError(f"expected one reply to {text!r}, got {len(repliers)}")
            return repliers[0]


def factory(mode: Mode, personas: Sequence[Persona]) -> TeamFactory:
    """Workflows of ``mode`` (``selection`` or ``manager``) with ``personas``.

    Raises:
        RuntimeError: Microsoft Agent Framework's orchestrations are not installed.
    """
    if not AVAILABLE:
        raise RuntimeError(f"{DISTRIBUTION} is not installed")
    return lambda calls: MafTeam(mode, personas, calls)
