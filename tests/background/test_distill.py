"""Heartbeat distillation: a daily log and MEMORY.md become a new, checked, versioned MEMORY.md."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.background.distill import run_distillation
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.errors import LLMError, ValidationError
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.memory.versions.store import VersionStore
from orchestrator.offline.model import OfflineProvider
from orchestrator.settings import Settings
from tests.waiting import wait_until

DAY = date(2026, 1, 5)
NOW = datetime(2026, 1, 5, 23, 30, tzinfo=UTC)
PREVIOUS = (
    "- [lesson] Ask for the expected load before choosing a database\n"
    "- [habit] Alex prefers short answers with code first\n"
    "- [lesson] Deploy with the Fabric scripts in ops/\n"
    "- [fact] The staging server is called tern\n"
)


def _note(settings: Settings, content: str, *, kind: str = "lesson", day: date = DAY) -> None:
    at = datetime(day.year, day.month, day.day, 10, 0, tzinfo=UTC)
    PersonalLog(settings.workspaces_dir, settings.zone).append(
        "ping", PersonalDraft(content=content, type=kind), source="team/1-0", now=at
    )


def _memory(settings: Settings) -> Path:
    return settings.workspaces_dir / "ping" / "MEMORY.md"


def _hand_write(settings: Settings, text: str) -> None:
    _memory(settings).parent.mkdir(parents=True, exist_ok=True)
    _memory(settings).write_text(text, encoding="utf-8")


async def _distil(settings, engine, llm, *, day: date = DAY, trigger: str = "heartbeat"):
    return await run_distillation(settings, engine, llm, "ping", day, trigger, NOW)


async def test_offline_day_of_notes_becomes_a_new_version(settings, engine):
    """Offline, a day's notes become MEMORY.md: duplicates once, newest last, versioned."""
    _note(settings, "Ask for the expected load first")
    _note(settings, "Alex wants code before prose", kind="habit")
    _note(settings, "Ask for the expected load first.")
    outcome = await _distil(settings, engine, OfflineProvider())
    assert outcome.status == "written"
    assert outcome.version == 1
    assert _memory(settings).read_text(encoding="utf-8") == (
        "- [habit] Alex wants code before prose\n- [lesson] Ask for the expected load first.\n"
    )
    version = VersionStore(engine).latest("memory_md", "ping")
    assert version is not None
    assert (version.trigger, version.lines_added, version.lines_removed) == ("heartbeat", 2, 0)
    assert version.source["logs"][0]["date"] == "2026-01-05"
    assert version.tokens == outcome.tokens == TokenCounter().count(version.text)


async def test_model_answer_becomes_a_version(settings, engine, fake_llm, model):
    """The agent's model gets the log and MEMORY.md and its checked answer is written."""
    _hand_write(settings, PREVIOUS)
    _note(settings, "Run the migrations before the tests")
    fake_llm.script(f"```markdown\n{PREVIOUS}- [lesson] Run the migrations before the tests\n```")
    outcome = await _distil(settings, engine, model)
    assert outcome.status == "written"
    assert outcome.version == 2  # the hand-written file became version 1
    assert _memory(settings).read_text(encoding="utf-8").endswith("before the tests\n")
    [request] = fake_llm.requests
    assert request["model"] == "claude-test"
    assert request["max_tokens"] == 2 * settings.distill_budget_tokens
    system = request["system"][0]["text"]
    assert "Run the migrations before the tests" in system
    assert "The staging server is called tern" in system
    versions = VersionStore(engine).history("memory_md", "ping")
    assert [(v.version, v.trigger) for v in versions] == [(1, "initial"), (2, "heartbeat")]


def _long_answer() -> str:
    words = " ".join(f"word{i}" for i in range(40))
    return PREVIOUS + "".join(f"- [lesson] {words} {i}\n" for i in range(30))


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_long_answer(), "over the budget of 500"),
        ("  \n", "the answer is empty"),
        (
            PREVIOUS + '<!--SAVE_MEMORY:{"type": "decision", "content": "x"}-->\n',
            "memory markers",
        ),
        (PREVIOUS + "<!--SAVE_TO_PERSONAL: broken\n", "memory markers"),
        ("- [lesson] Run the migrations before the tests\n", "drops 4 of 4 previous entries"),
    ],
    ids=["over-budget", "empty", "marker", "broken-marker", "over-deleting"],
)
async def test_bad_answer_leaves_memory_intact(settings, engine, fake_llm, model, answer, reason):
    """A bad answer is rejected with its reason and MEMORY.md stays as it was."""
    _hand_write(settings, PREVIOUS)
    _note(settings, "Run the migrations before the tests")
    fake_llm.script(answer)
    outcome = await _distil(settings, engine, model)
    assert outcome.status == "rejected"
    assert reason in outcome.reason
    assert _memory(settings).read_text(encoding="utf-8") == PREVIOUS
    store = VersionStore(engine)
    assert [v.trigger for v in store.history("memory_md", "ping")] == ["initial"]
    [run] = store.runs("memory_md", "ping")
    assert (run.status, run.reason) == ("rejected", outcome.reason)


async def test_answer_cut_off_at_the_token_limit_is_rejected(settings, engine, fake_llm, model):
    """An answer that stopped at max_tokens is rejected rather than written half."""
    _note(settings, "Run the migrations before the tests")
    fake_llm.script("- [lesson] Run the migra", stop_reason="max_tokens")
    outcome = await _distil(settings, engine, model)
    assert (outcome.status, outcome.reason) == (
        "rejected",
        "the answer was cut off at its token limit",
    )
    assert not _memory(settings).exists()


async def test_log_calling_an_entry_obsolete_allows_dropping_it(settings, engine, fake_llm, model):
    """Entries the day's log calls obsolete may go beyond the drop share."""
    _hand_write(settings, PREVIOUS)
    _note(settings, "The Fabric scripts are obsolete: we deploy with Ansible now", kind="note")
    _note(settings, "The staging server tern was replaced by heron", kind="note")
    kept = PREVIOUS.splitlines(keepends=True)[:2]
    fake_llm.script("".join(kept) + "- [fact] We deploy to heron with Ansible\n")
    outcome = await _distil(settings, engine, model)
    assert outcome.status == "written", outcome.reason
    assert outcome.lines_removed == 2


async def test_offline_drops_what_the_log_calls_obsolete(settings, engine):
    """The offline distillation leaves out entries the log calls obsolete."""
    _hand_write(settings, PREVIOUS)
    _note(settings, "Deploying with the Fabric scripts is no longer done", kind="note")
    outcome = await _distil(settings, engine, OfflineProvider())
    assert outcome.status == "written"
    text = _memory(settings).read_text(encoding="utf-8")
    assert "Fabric scripts in ops" not in text
    assert "staging server is called tern" in text


async def test_nothing_new_is_skipped_without_a_model_call(settings, engine, fake_llm, model):
    """No log, or a log already distilled, is skipped and the model is not asked."""
    first = await _distil(settings, engine, model)
    assert (first.status, first.reason) == ("skipped", "no notes in the day's log")
    _note(settings, "Run the migrations before the tests")
    fake_llm.script("- [lesson] Run the migrations before the tests\n")
    assert (await _distil(settings, engine, model)).status == "written"
    again = await _distil(settings, engine, model, trigger="catch-up")
    assert (again.status, again.reason) == ("skipped", "the day's log was already distilled")
    assert len(fake_llm.requests) == 1
    statuses = [r.status for r in VersionStore(engine).runs("memory_md", "ping")]
    assert statuses == ["skipped", "written", "skipped"]


async def test_hand_edit_is_kept_as_a_version_before_distilling(settings, engine):
    """A MEMORY.md edited by hand is stored as a version of its own, then distilled."""
    _note(settings, "Ask for the expected load first")
    await _distil(settings, engine, OfflineProvider())
    _hand_write(settings, "- [habit] Alex reads diffs, not prose\n")
    next_day = DAY + timedelta(days=1)
    _note(settings, "Keep pull requests small", day=next_day)
    outcome = await _distil(settings, engine, OfflineProvider(), day=next_day)
    assert outcome.version == 3
    store = VersionStore(engine)
    versions = store.history("memory_md", "ping")
    assert [v.trigger for v in versions] == ["heartbeat", "edited", "heartbeat"]
    assert versions[1].text == "- [habit] Alex reads diffs, not prose\n"
    assert "Alex reads diffs" in versions[2].text
    assert "Keep pull requests small" in versions[2].text


async def test_file_changed_during_the_call_is_a_conflict(settings, engine, fake_llm, model):
    """When MEMORY.md changes while the model thinks, the answer is not written over it."""
    _hand_write(settings, PREVIOUS)
    _note(settings, "Run the migrations before the tests")
    fake_llm.script(PREVIOUS + "- [lesson] Run the migrations first\n", latency_s=0.5)
    edited = PREVIOUS + "- [fact] Edited by hand meanwhile\n"

    async def edit_meanwhile() -> None:
        await wait_until(lambda: bool(fake_llm.requests), timeout_s=10, what="the model's call")
        await asyncio.to_thread(_hand_write, settings, edited)

    outcome, _ = await asyncio.gather(_distil(settings, engine, model), edit_meanwhile())
    assert outcome.status == "conflict"
    assert _memory(settings).read_text(encoding="utf-8") == edited
    assert [r.status for r in VersionStore(engine).runs("memory_md", "ping")] == ["conflict"]


async def test_model_error_is_recorded_and_raised(settings, engine, fake_llm, model):
    """A failing model call is kept as an error run and raised for the job to retry."""
    _note(settings, "Run the migrations before the tests")
    fake_llm.script(status=500)
    with pytest.raises(LLMError):
        await _distil(settings, engine, model)
    [run] = VersionStore(engine).runs("memory_md", "ping")
    assert run.status == "error"
    assert "500" in run.reason
    assert not _memory(settings).exists()


async def test_unknown_or_invalid_agent_is_refused(settings, engine):
    """Ids that name no agent, or could leave the workspaces, are refused."""
    for agent_id in ("nobody", "../ping"):
        with pytest.raises(ValidationError):
            await run_distillation(settings, engine, OfflineProvider(), agent_id, DAY, "x", NOW)


async def test_every_version_is_kept(settings, engine):
    """A week of heartbeats keeps every version, each with its text and diff counts."""
    for offset in range(5):
        day = DAY + timedelta(days=offset)
        _note(settings, f"Lesson number {offset} about testing", day=day)
        assert (await _distil(settings, engine, OfflineProvider(), day=day)).status == "written"
    store = VersionStore(engine)
    versions = store.history("memory_md", "ping")
    assert [v.version for v in versions] == [1, 2, 3, 4, 5]
    assert all(v.lines_added == 1 and v.lines_removed == 0 for v in versions)
    third = store.get("memory_md", "ping", 3)
    assert third is not None
    assert third.text.count("\n") == 3
    assert versions[-1].source["logs"][0]["date"] == "2026-01-09"


def test_racing_writers_get_distinct_version_numbers(engine):
    """Concurrent writers of one owner's versions never share or skip a number."""
    store = VersionStore(engine)

    def write(worker: int) -> None:
        for i in range(5):
            store.add("summary", "team", f"{worker}-{i}\n", trigger="x", created_at=NOW, tokens=1)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [v.version for v in store.history("summary", "team")] == list(range(1, 21))
