"""Rolling summaries: a group's messages become a bounded, versioned summary file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.background.summary import run_summary
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.errors import ValidationError
from orchestrator.memory.summaries import summary_path
from orchestrator.memory.versions.store import VersionStore
from orchestrator.offline.model import OfflineProvider
from tests.history_seed import write_history

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
REQUIREMENT_MARKER = {
    "kind": "memory",
    "payload": {"type": "requirement", "content": "Pages must load in under 200 ms"},
}


def _say(engine, n: int, text: str, *, sender: str = "alex", meta=None, group: str = "team"):
    kind = MessageKind.HUMAN if sender == "alex" else MessageKind.AGENT
    message = ChatMessage(
        id=f"{n}-0",
        group=group,
        sender=sender,
        kind=kind,
        text=text,
        created_at=T0 + timedelta(minutes=n),
    )
    write_history(engine, message, meta=meta)


def _twenty(engine) -> None:
    """Twenty messages: a goal, a decision, a task, an agent's requirement, and chatter."""
    _say(engine, 0, "We are building a booking site for a small dentist practice.")
    _say(engine, 1, "Hello team, nice to meet you.", sender="ping")
    _say(engine, 2, "After some thought we decided to use PostgreSQL for storage. Thanks!")
    _say(
        engine, 3, "Noted, PostgreSQL it is.", sender="pong", meta={"markers": [REQUIREMENT_MARKER]}
    )
    _say(engine, 4, "Todo: @ping draft the booking schema.")
    for n in range(5, 20):
        _say(engine, n, f"Chatter number {n}.", sender="ping" if n % 2 else "alex")


async def test_twenty_messages_produce_a_summary_version(settings, engine):
    """Offline, twenty messages give a summary with the goal, decisions with who and when."""
    _twenty(engine)
    outcome = await run_summary(settings, engine, OfflineProvider(), "team", None, "messages", NOW)
    assert outcome.status == "written"
    assert (outcome.version, outcome.upto_seq, outcome.messages) == (1, 20, 20)
    text = summary_path(settings.data_dir, "team").read_text(encoding="utf-8")
    assert "## Goal\n- We are building a booking site for a small dentist practice." in text
    assert "- 2026-01-05 09:02 alex: After some thought we decided to use PostgreSQL" in text
    assert "- 2026-01-05 09:03 pong: Pages must load in under 200 ms" in text
    assert "- 2026-01-05 09:04 alex: Todo: ping draft the booking schema." in text
    assert "- 20 messages so far" in text
    assert "Chatter" not in text
    version = VersionStore(engine).latest("summary", "team")
    assert version is not None
    assert version.source == {"from_seq": 1, "upto_seq": 20, "messages": 20}
    assert version.trigger == "messages"


async def test_summaries_roll_forward(settings, engine):
    """A later run reads only the new messages and keeps what the earlier summary said."""
    _twenty(engine)
    first = await run_summary(settings, engine, OfflineProvider(), "team", 10, "messages", NOW)
    assert (first.upto_seq, first.messages) == (10, 10)
    _say(engine, 30, "Decision: we host it on a single VPS.")
    second = await run_summary(settings, engine, OfflineProvider(), "team", None, "decision", NOW)
    assert (second.version, second.upto_seq, second.messages) == (2, 21, 11)
    text = summary_path(settings.data_dir, "team").read_text(encoding="utf-8")
    assert "we decided to use PostgreSQL" in text
    assert "alex: Decision: we host it on a single VPS." in text
    assert "- 21 messages so far" in text


async def test_nothing_new_is_skipped_without_a_model_call(settings, engine, fake_llm, model):
    """With no message after the last summary, nothing is asked and nothing written."""
    empty = await run_summary(settings, engine, model, "team", None, "messages", NOW)
    assert (empty.status, empty.reason) == ("skipped", "no new messages after #0")
    _twenty(engine)
    fake_llm.script("# Summary of team\n\n## Goal\n- A booking site\n")
    assert (await run_summary(settings, engine, model, "team", None, "manual", NOW)).version == 1
    again = await run_summary(settings, engine, model, "team", None, "messages", NOW)
    assert (again.status, again.reason) == ("skipped", "no new messages after #20")
    assert len(fake_llm.requests) == 1
    statuses = [r.status for r in VersionStore(engine).runs("summary", "team")]
    assert statuses == ["skipped", "written", "skipped"]


async def test_model_gets_the_previous_summary_and_new_messages(settings, engine, fake_llm, model):
    """The model sees the previous summary and each new message with number, time and sender."""
    path = summary_path(settings.data_dir, "team")
    path.parent.mkdir(parents=True)
    path.write_text("# Summary of team\n\n## Goal\n- Written by hand\n", encoding="utf-8")
    _twenty(engine)
    fake_llm.script("# Summary of team\n\n## Goal\n- A booking site for a dentist\n")
    outcome = await run_summary(settings, engine, model, "team", None, "manual", NOW)
    assert outcome.version == 2
    system = fake_llm.requests[0]["system"][0]["text"]
    assert "- Written by hand" in system
    assert "#3 2026-01-05 09:02 alex (human): After some thought we decided" in system
    assert fake_llm.requests[0]["model"] == "claude-test"
    triggers = [v.trigger for v in VersionStore(engine).history("summary", "team")]
    assert triggers == ["initial", "manual"]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("\n", "the answer is empty"),
        ('- ok <!--SAVE_MEMORY:{"type": "decision", "content": "x"}-->', "memory markers"),
        ("- " + "word " * 900, "over the budget"),
    ],
    ids=["empty", "marker", "over-budget"],
)
async def test_bad_answer_is_rejected(settings, engine, fake_llm, model, answer, reason):
    """An empty, marker-carrying or over-budget answer writes nothing and says why."""
    _twenty(engine)
    fake_llm.script(answer)
    outcome = await run_summary(settings, engine, model, "team", None, "messages", NOW)
    assert outcome.status == "rejected"
    assert reason in outcome.reason
    assert not summary_path(settings.data_dir, "team").exists()
    assert VersionStore(engine).history("summary", "team") == []


async def test_summary_stays_within_its_budget(settings, engine):
    """Two hundred decisions still make a summary within the budget, newest kept."""
    for n in range(200):
        _say(engine, n, f"We decided to adopt guideline number {n} for the whole codebase.")
    outcome = await run_summary(settings, engine, OfflineProvider(), "team", None, "messages", NOW)
    assert outcome.status == "written"
    text = summary_path(settings.data_dir, "team").read_text(encoding="utf-8")
    assert TokenCounter().count(text) <= settings.summary_budget_tokens
    assert "guideline number 199 " in text
    assert "guideline number 5 " not in text


async def test_invalid_group_is_refused(settings, engine):
    """A group id that is not one is refused before anything is read."""
    with pytest.raises(ValidationError):
        await run_summary(settings, engine, OfflineProvider(), "../etc", None, "manual", NOW)
