"""AutoGen AgentChat's group chats as peers of ``tests/bench/peers.py``.

One team per group with our four agents (ids, descriptions, ``CLAUDE.md`` + ``SOUL.md`` as the
system message); each message is one ``team.run(task=...)`` that stops after one agent reply
(a termination condition that stops on the first message after the task). The team keeps what
its runs saw. The
model is a zero-latency ``ChatCompletionClient``: agents get a fixed short answer; the
selector's own model call (SelectorGroupChat asks the model who speaks next) goes to the same
kind of client, which names the mentioned agent. RoundRobinGroupChat picks the speaker by turn:
it does no routing at all.

Prior messages (``--realistic``) are given with a group's first message, as the run's task
list (AgentChat stores no message without a run): the team adds them to its thread, and each
agent gets them with its next turn.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal

from tests.bench.peer_workload import REPLY, Calls, Persona, Prior, TeamFactory, mentioned

try:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import ChatAgent, Team, TerminationCondition
    from autogen_agentchat.messages import (
        BaseAgentEvent,
        BaseChatMessage,
        StopMessage,
        TextMessage,
    )
    from autogen_agentchat.teams import BaseGroupChat, RoundRobinGroupChat, SelectorGroupChat
    from autogen_core import CancellationToken
    from autogen_core.models import (
        ChatCompletionClient,
        CreateResult,
        LLMMessage,
        ModelCapabilities,
        ModelFamily,
        ModelInfo,
        RequestUsage,
    )
    from autogen_core.tools import Tool, ToolSchema
    from pydantic import BaseModel
except ModuleNotFoundError as exc:  # the optional `bench` extra is not installed
    if not (exc.name or "").startswith("autogen"):
        raise
    AVAILABLE = False
else:
    AVAILABLE = True

__all__ = ["AVAILABLE", "DISTRIBUTION", "factory"]

DISTRIBUTION = "autogen-agentchat"
Mode = Literal["selector", "roundrobin"]


if AVAILABLE:

    class InstantClient(ChatCompletionClient):
        """A model that answers at once: the mentioned agent's name, or a fixed reply.

        With ``names`` it plays SelectorGroupChat's selector and returns the last ``@name`` in
        the prompt (the prompt ends with the latest message); without, it returns ``REPLY``.
        """

        def __init__(self, calls: Calls, names: Sequence[str] = ()) -> None:
            self._names = list(names)
            self._calls = calls

        def _answer(self, messages: Sequence[LLMMessage]) -> CreateResult:
            content = REPLY
            if self._names:
                self._calls.selector += 1
                self._calls.selector_prompt_chars += sum(len(str(m.content)) for m in messages)
                content = mentioned(str(messages[-1].content) if messages else "", self._names)
            else:
                self._calls.agent += 1
            return CreateResult(
                finish_reason="stop",
                content=content,
                usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                cached=False,
            )

        async def create(
            self,
            messages: Sequence[LLMMessage],
            *,
            tools: Sequence[Tool | ToolSchema] = (),
            tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
            json_output: bool | type[BaseModel] | None = None,
            extra_create_args: Mapping[str, Any] = {},
            cancellation_token: CancellationToken | None = None,
        ) -> CreateResult:
            return self._answer(messages)

        async def create_stream(
            self,
            messages: Sequence[LLMMessage],
            *,
            tools: Sequence[Tool | ToolSchema] = (),
            tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
            json_output: bool | type[BaseModel] | None = None,
            extra_create_args: Mapping[str, Any] = {},
            cancellation_token: CancellationToken | None = None,
        ) -> AsyncGenerator[str | CreateResult, None]:
            yield self._answer(messages)

        async def close(self) -> None:
            return None

        def actual_usage(self) -> RequestUsage:
            return RequestUsage(prompt_tokens=0, completion_tokens=0)

        def total_usage(self) -> RequestUsage:
            return RequestUsage(prompt_tokens=0, completion_tokens=0)

        def count_tokens(
            self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()
        ) -> int:
            return sum(len(str(m.content)) // 4 for m in messages)

        def remaining_tokens(
            self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()
        ) -> int:
            return 200_000 - self.count_tokens(messages)

        @property
        def capabilities(self) -> ModelCapabilities:  # deprecated in the base class
            return {"vision": False, "function_calling": False, "json_output": False}

        @property
        def model_info(self) -> ModelInfo:
            return {
                "vision": False,
                "function_calling": False,
                "json_output": False,
                "family": ModelFamily.UNKNOWN,
                "structured_output": False,
            }

    class OneReply(TerminationCondition):
        """Stops a run on the first message after its task (``MaxMessageTermination(2)`` when
        the task is one message; a task of prior messages and the new one counts as one)."""

        def __init__(self) -> None:
            self._task_seen = False
            self._done = False

        @property
        def terminated(self) -> bool:
            return self._done

        async def __call__(
            self, messages: Sequence[BaseAgentEvent | BaseChatMessage]
        ) -> StopMessage | None:
            if not self._task_seen:
                self._task_seen = True
                return None
            self._done = True
            return StopMessage(content="one reply", source="OneReply")

        async def reset(self) -> None:
            self._task_seen = self._done = False

    class AutoGenTeam:
        """One group's AgentChat team."""

        def __init__(self, team: BaseGroupChat) -> None:
            self._team = team

        async def ask(self, text: str, prior: Sequence[Prior] = ()) -> str:
            task = [TextMessage(source=p.sender, content=p.text) for p in prior]
            task.append(TextMessage(source="user", content=text))
            result = await self._team.run(task=task if prior else text)
            replies = result.messages[len(task) :]
            if len(replies) != 1:
                raise RuntimeError(f"expected one reply to {text!r}, got {len(replies)}")
            return replies[0].source

    def build_team(mode: Mode, personas: Sequence[Persona], calls: Calls) -> BaseGroupChat:
        """One group's team: our agents, stopping after the task plus one agent reply."""
        client = InstantClient(calls)
        agents: list[ChatAgent | Team] = [
            AssistantAgent(
                p.id,
                model_client=client,
                description=p.description,
                system_message=p.system_message,
            )
            for p in personas
        ]
        stop = OneReply()
        if mode == "selector":
            # Our router lets the mentioned agent answer even if it answered the last message.
            selector = InstantClient(calls, names=[p.id for p in personas])
            return SelectorGroupChat(
                agents,
                model_client=selector,
                termination_condition=stop,
                allow_repeated_speaker=True,
            )
        return RoundRobinGroupChat(agents, termination_condition=stop)


def factory(mode: Mode, personas: Sequence[Persona]) -> TeamFactory:
    """Teams of ``mode`` (``selector`` or ``roundrobin``) with ``personas``.

    Raises:
        RuntimeError: AutoGen AgentChat is not installed.
    """
    if not AVAILABLE:
        raise RuntimeError(f"{DISTRIBUTION} is not installed")
    return lambda calls: AutoGenTeam(build_team(mode, personas, calls))
