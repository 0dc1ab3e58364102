"""What the console's JSON API answers, as models: ``/openapi.json`` documents each route's
answer with one, and FastAPI checks every answer against it before it is sent.

Each model is frozen and forbids keys it does not name; its fields are in the order the keys
are sent, and none has a default but :func:`optional_key`'s, a key left out when it has no
value (every other key is always sent, ``null`` when empty). Errors are :class:`ErrorBody`,
documented on each route with :func:`errors`. This module holds the rooms, the team, the
routing dry run and the dead letters; :mod:`~orchestrator.web.schemas_memory` memory, growth
and context; :mod:`~orchestrator.web.schemas_status` the status and the budget.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.models import RouteReason

__all__ = [
    "AgentView",
    "Answer",
    "ContextBar",
    "DeadLetter",
    "DeadLetters",
    "ErrorBody",
    "GroupRow",
    "Groups",
    "Message",
    "MessagePage",
    "MessageRun",
    "Posted",
    "Routing",
    "Team",
    "TeamMember",
    "ToolLine",
    "UsageView",
    "Why",
    "WrittenToMemory",
    "errors",
    "optional_key",
]

_COMPONENTS = "#/components/schemas/"
_WHY_ERROR = {
    400: "Malformed: the reason, in one line.",
    403: "Not yours to do (only ARENA_OWNER decides a request; never an agent): why.",
    404: "No such group, agent, memory, version, dead letter, run, request or allow-list entry.",
    409: "Its state refuses it (it changed since it was read, a run already ended, a request "
    "was already decided): why.",
    413: "The body is over the route's limit (refused before it is read).",
    422: "A parameter or the body is not valid: which, and why.",
    503: "Redis or the database cannot be reached, or no agents are defined.",
}


class Answer(BaseModel):
    """A JSON answer of the API: frozen, and no key but those it names."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ErrorBody(Answer):
    """Every error: 4xx or 5xx, with the reason in one line."""

    error: str = Field(description="What went wrong, in one line.")


def errors(*codes: int, not_json: bool = False) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=``: it answers each of ``codes`` with an :class:`ErrorBody`.

    ``not_json``: the route's own answer is not JSON. FastAPI would file the model under the
    route's media type, so the error's is given, naming the model by reference (it is among
    the schemas through the other routes).
    """
    if not_json:
        content = {"application/json": {"schema": {"$ref": _COMPONENTS + ErrorBody.__name__}}}
        return {code: {"description": _WHY_ERROR[code], "content": content} for code in codes}
    return {code: {"model": ErrorBody, "description": _WHY_ERROR[code]} for code in codes}


def _no_null(schema: dict[str, Any]) -> None:
    """The schema of a key that is left out rather than sent as null."""
    schema.pop("default", None)
    options = [o for o in schema.pop("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        schema.update(options[0])
    elif options:
        schema["anyOf"] = options


def optional_key(description: str) -> Any:
    """A field whose key is sent only when it has a value (None: the key is left out)."""
    return Field(
        default=None,
        description=description,
        exclude_if=lambda value: value is None,
        json_schema_extra=_no_null,
    )


class GroupRow(Answer):
    """A group: its message count, last activity (ISO 8601) and last sender."""

    group: str
    messages: int
    last_at: str | None
    last_sender: str | None


class Groups(Answer):
    """Every group, newest activity first."""

    groups: list[GroupRow]


class AgentView(Answer):
    """An agent as a message shows it: its id, name, role and colour (``#rrggbb``)."""

    id: str
    name: str
    role: str
    colour: str


class Why(Answer):
    """Why an agent answered: routed to it (mention, rule, default) or handed the turn."""

    reason: str = Field(description="mention, rule, default or handoff.")
    rule: str | None
    keywords: list[str]
    handed_by: str | None = Field(
        alias="from", description="Who mentioned the agent, or handed it the turn."
    )
    hop: int
    hop_limit: int
    text: str = Field(description="One line a person reads.")


class WrittenToMemory(Answer):
    """A memory entry a reply saved, reinforced or that was rejected (its text never kept)."""

    outcome: str = Field(description="saved, reinforced or rejected.")
    type: str
    text: str
    reason: str | None


class UsageView(Answer):
    """The tokens a reply took, its cache read share, latency and model."""

    input: int
    output: int
    cache_read: int
    cache_read_share: float
    latency_ms: float
    model: str | None
    calls: int | None = optional_key("The model calls it took, when it called memory tools.")


class ContextBar(Answer):
    """The context a reply was given: each layer's tokens, and the total."""

    layers: dict[str, int]
    total: int


class ToolLine(Answer):
    """A memory tool the reply called, as one line (``memory_search("db") → 2 hits``)."""

    line: str
    is_error: bool
    result_chars: int


class MessageRun(Answer):
    """The Claude Code run a run's card (a notice, ``notice: run``) or its reply is about: how
    it stands (the card's: as it started), what it changed and what it cost."""

    id: str = Field(description="The run's id: its reply's.")
    status: str = Field(description="queued on the card; done, failed, cancelled, ... at the end.")
    why: str = Field(description="Why the turn became a run.")
    files: list[str] = Field(description="The files it changed.")
    stat: str = Field(description="git diff --stat of its commit.")
    commit: str | None
    merged: bool | None = Field(description="Brought into the project (false: kept on branch).")
    branch: str | None = Field(description="The branch it was kept on for review.")
    reason: str | None = Field(description="Why it was not merged.")
    turns: int
    duration_ms: int
    cost_usd: float | None
    agent: AgentView | None = Field(description="The agent whose run it is.")


class Message(Answer):
    """One message of a room, with what the console shows beside it."""

    id: str
    seq: int = Field(description="Its place in the group (0: not stored yet).")
    group: str
    sender: str
    kind: str = Field(description="human, agent or notice.")
    text: str = Field(description="Markdown, as written.")
    html: str = Field(description="The text as safe HTML.")
    created_at: str
    hop: int
    in_reply_to: str | None
    agent: AgentView | None
    why: Why | None
    memory: list[WrittenToMemory]
    usage: UsageView | None
    context: ContextBar | None
    notice: str | None
    tools: list[ToolLine]
    run: MessageRun | None = optional_key("A run's card or reply: the run.")


class MessagePage(Answer):
    """A room's messages, oldest first; ``before``: the cursor of the page before (null:
    none)."""

    group: str
    messages: list[Message]
    before: int | None


class Posted(Answer):
    """The id of the message posted (a Redis stream entry id)."""

    id: str


class Routing(Answer):
    """Which agents would answer a text, and why (``arena route``)."""

    agents: list[str]
    reason: RouteReason
    rule: str | None
    keywords_hit: list[str]
    detail: str


class DeadLetter(Answer):
    """A message that was rejected or could not be answered: its dead letter's ``id``, then
    the ``entry_id`` it had, the ``reason``, and the fields it was posted with (``group``,
    ``sender``, ``text`` when they were readable)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, str] = Field(init=False)

    id: str


class DeadLetters(Answer):
    """The newest dead letters, oldest first (``arena dead-letters --json``)."""

    dead_letters: list[DeadLetter]


class TeamMember(AgentView):
    """An agent of the team, with its description and whether it is the default agent."""

    description: str
    default: bool


class Team(Answer):
    """The team, in the order of its files."""

    agents: list[TeamMember]
