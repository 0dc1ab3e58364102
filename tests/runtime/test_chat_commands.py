"""`/approve` and `/deny` typed in a group: decided as the message's sender by the pipeline,
answered with a notice, routed to no agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.core.approvals import Ask
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.approvals import ApprovalRecord, ApprovalStore
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.runs import RunRecord, RunStore
from orchestrator.runtime.approving import Approvals
from orchestrator.runtime.chat_commands import NOT_HERE, ChatCommand, parse_command
from orchestrator.settings import Settings
from tests.arena_helpers import make_pipeline
from tests.fakes import anthropic_provider
from tests.history_seed import replies

AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
RUN = "900-0:1:ping"


@dataclass
class Woken:
    """The runs a decision woke (a run that stopped waiting), as (run, request)."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(self, run: RunRecord, approval_id: str) -> None:
        self.calls.append((run.id, approval_id))


@pytest.fixture
def request_made(store: HistoryStore) -> ApprovalRecord:
    """A pending request of run RUN in group "team", as the run asks it."""
    RunStore(store.engine).create(
        run_id=RUN, group="team", agent="ping", trigger_id="900-0", root_id="900-0", hop=1,
        why="code rule implement matched", now=AT,
    )  # fmt: skip
    ask = Ask(
        kind="tool", tool="Bash", input={"command": "npm install left-pad"}, cwd="/p",
        reason="runs npm", pattern="Bash(npm install *)",
    )  # fmt: skip
    made, _ = ApprovalStore(store.engine).request(
        run_id=RUN, group="team", agent="ping", ask=ask, why="needs a package", decider="user",
        now=AT, expires_in=timedelta(minutes=30),
    )  # fmt: skip
    return made


def _approvals(store: HistoryStore) -> Approvals:
    return Approvals(
        ApprovalStore(store.engine),
        RunStore(store.engine),
        owner="user",
        agents=frozenset({"ping", "pong", "helper"}),
        wake=Woken(),
        clock=lambda: AT + timedelta(minutes=1),
    )


def _typed(text: str, sender: str, message_id: str = "1000-0") -> ChatMessage:
    return ChatMessage(
        id=message_id, group="team", sender=sender, kind=MessageKind.HUMAN, text=text,
        created_at=AT + timedelta(minutes=1),
    )  # fmt: skip


async def _handle(
    settings: Settings, store: HistoryStore, base_url: str, approvals: Approvals | None,
    *messages: ChatMessage,
):  # fmt: skip
    llm = anthropic_provider(api_key="test", base_url=base_url, timeout_s=5, max_retries=0)
    pipeline, outbox, _events = make_pipeline(settings, store, llm, approvals=approvals)
    try:
        for message in messages:
            await pipeline.handle(message)
    finally:
        await llm.aclose()
    return outbox


async def test_approve_by_the_owner_decides_and_reaches_no_agent(
    settings, store, fake_llm, request_made
):
    """The owner's `/approve ID --always note`: approved with the note and the pattern kept, a
    notice says so in the room, the model is never asked; handled again, nothing changes."""
    typed = _typed(f"/approve {request_made.id} --always fine by me", "user")
    approvals = _approvals(store)
    outbox = await _handle(settings, store, fake_llm.base_url, approvals, typed, typed)
    assert fake_llm.requests == []
    record = ApprovalStore(store.engine).get(request_made.id)
    assert record is not None
    assert (record.state, record.decided_by, record.note) == ("approved", "user", "fine by me")
    assert [r.pattern for r in ApprovalStore(store.engine).allowed("ping")] == [
        "Bash(npm install *)"
    ]
    expected = f"{request_made.id} approved; Bash(npm install *) is on ping's allow-list"
    assert [(i.type, i.sender, i.text) for i in outbox.items if i.type != "done"] == [
        ("notice", "arena", expected)
    ]
    assert [r.message.text for r in replies(store, typed.id)] == [expected]
    stored = store.get(typed.id)
    assert stored is not None
    assert stored.status == "done"
    assert stored.route is not None
    assert (stored.route["agents"], stored.route["reason"]) == ([], "command")


async def test_deny_by_someone_else_is_refused(settings, store, fake_llm, request_made):
    """`/deny ID` from a person who is not the owner: a notice refuses it, nothing decided,
    no agent asked."""
    typed = _typed(f"/deny {request_made.id} no way", "alice")
    outbox = await _handle(settings, store, fake_llm.base_url, _approvals(store), typed)
    assert fake_llm.requests == []
    record = ApprovalStore(store.engine).get(request_made.id)
    assert record is not None
    assert record.state == "pending"
    notices = [i.text for i in outbox.items if i.type == "notice"]
    assert notices == ["only user decides (not alice)"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("/approve", "usage: /approve ID [--always] [note…]"),
        ("/deny ap-0000000000 --always", "--always goes with /approve: /deny ID [note…]"),
        ("/approve 42", "id: '42' is not an approval id (ap- and 10 hex)"),
        ("/deny ap-0000000000", "id: no approval ap-0000000000 (`arena approvals`)"),
    ],
)
async def test_a_malformed_command_is_answered_not_routed(settings, store, fake_llm, text, said):
    """A command without an id, with a bad one or an unknown one: a notice says what is
    wrong, the model is never asked."""
    outbox = await _handle(
        settings, store, fake_llm.base_url, _approvals(store), _typed(text, "user")
    )
    assert fake_llm.requests == []
    assert [i.text for i in outbox.items if i.type == "notice"] == [said]


async def test_without_approvals_the_room_is_told(settings, store, fake_llm, request_made):
    """A pipeline given no approvals answers a command with a notice that says so."""
    typed = _typed(f"/approve {request_made.id}", "user")
    outbox = await _handle(settings, store, fake_llm.base_url, None, typed)
    assert fake_llm.requests == []
    assert [i.text for i in outbox.items if i.type == "notice"] == [NOT_HERE]


async def test_a_message_that_only_mentions_approve_goes_to_the_agents(settings, store, fake_llm):
    """`/approved`, or `/approve` inside a sentence, is a message for the agents."""
    fake_llm.reply_fn = lambda r: "noted"
    typed = _typed("@ping I /approve of this", "user")
    outbox = await _handle(settings, store, fake_llm.base_url, _approvals(store), typed)
    assert len(fake_llm.requests) == 1
    assert [i.type for i in outbox.items] == ["reply", "done"]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/approve ap-0123456789", ChatCommand(name="approve", approval_id="ap-0123456789")),
        (
            "  /approve ap-0123456789 --always ok then ",
            ChatCommand(name="approve", approval_id="ap-0123456789", always=True, note="ok then"),
        ),
        (
            "/deny ap-0123456789 not\nnow",
            ChatCommand(name="deny", approval_id="ap-0123456789", note="not\nnow"),
        ),
        ("/approved ap-0123456789", None),
        ("please /approve ap-0123456789", None),
    ],
)
def test_what_is_a_command(text: str, parsed: ChatCommand | None):
    """Only a text that starts with the command word is a command; the rest is its note."""
    assert parse_command(text) == parsed
