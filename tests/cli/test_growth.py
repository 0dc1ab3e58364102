"""``arena growth``, ``arena logs`` and ``arena summary`` as people use them."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, date, datetime

import pytest
from click.testing import CliRunner

from orchestrator.background.distill import run_distillation
from orchestrator.background.summary import run_summary
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.memory.versions.store import VersionStore
from orchestrator.offline.model import OfflineProvider
from orchestrator.settings import Settings
from tests.history_seed import write_history

DAY1, DAY2 = date(2026, 1, 5), date(2026, 1, 6)
NOW = datetime(2026, 1, 6, 23, 30, tzinfo=UTC)

# `arena` in this process reads the test team's settings from the environment.
pytestmark = pytest.mark.usefixtures("settings_env")


def _note(settings: Settings, content: str, day: date) -> None:
    at = datetime(day.year, day.month, day.day, 10, 15, tzinfo=UTC)
    PersonalLog(settings.workspaces_dir, settings.zone).append(
        "ping", PersonalDraft(content=content, type="lesson"), source="team/1-0", now=at
    )


@pytest.fixture
def grown(settings: Settings) -> Settings:
    """Two days of ping's notes distilled into two versions, and one rejected attempt."""
    engine = make_engine(settings.effective_database_url)
    try:
        for day, note in ((DAY1, "Ask for the expected load first"), (DAY2, "Keep PRs small")):
            _note(settings, note, day)
            outcome = asyncio.run(
                run_distillation(settings, engine, OfflineProvider(), "ping", day, "heartbeat", NOW)
            )
            assert outcome.status == "written"
        VersionStore(engine).record_run(
            "memory_md",
            "ping",
            status="rejected",
            trigger="idle",
            created_at=NOW,
            reason="the answer is empty",
        )
    finally:
        engine.dispose()
    return settings


def _post(engine, n: int, text: str) -> None:
    write_history(
        engine,
        ChatMessage(
            id=f"{n}-0",
            group="team",
            sender="alex",
            kind=MessageKind.HUMAN,
            text=text,
            created_at=datetime(2026, 1, 6, 9, n, tzinfo=UTC),
        ),
    )


def _arena(*args: str):
    return CliRunner().invoke(main, list(args))


def test_growth_table_lists_versions_and_failed_attempts(grown):
    """The timeline shows each version with trigger and +/- lines, and the failed attempt."""
    result = _arena("growth", "ping")
    assert result.exit_code == 0, result.output
    assert "ping MEMORY.md" in result.output
    assert "heartbeat" in result.output
    assert "+1" in result.output
    assert "rejected" in result.output
    assert "the answer is empty" in result.output


def test_growth_json_is_stable(grown):
    """--json gives every version's numbers and every attempt that wrote nothing."""
    result = _arena("growth", "ping", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["agent"] == "ping"
    assert [v["version"] for v in data["versions"]] == [1, 2]
    first = data["versions"][0]
    assert set(first) == {
        "version",
        "created_at",
        "trigger",
        "tokens",
        "lines_added",
        "lines_removed",
        "sha256",
        "source",
    }
    assert first["source"]["logs"][0]["date"] == "2026-01-05"
    assert (first["lines_added"], first["lines_removed"]) == (1, 0)
    [attempt] = data["attempts"]
    assert (attempt["status"], attempt["trigger"]) == ("rejected", "idle")
    assert attempt["reason"] == "the answer is empty"


def test_growth_diff_and_show(grown):
    """--diff N prints what version N changed; --show N prints its text."""
    diff = _arena("growth", "ping", "--diff", "2")
    assert diff.exit_code == 0, diff.output
    assert "+++ ping/MEMORY.md v2" in diff.output
    assert "+- [lesson] Keep PRs small" in diff.output
    assert "\x1b[" not in diff.output  # no colour when not a terminal
    first = _arena("growth", "ping", "--diff", "1")
    assert "+- [lesson] Ask for the expected load first" in first.output
    shown = _arena("growth", "ping", "--show", "1")
    assert shown.exit_code == 0, shown.output
    assert shown.output == "- [lesson] Ask for the expected load first\n"
    missing = _arena("growth", "ping", "--show", "9")
    assert missing.exit_code == 1
    assert "no version 9 (the latest is 2)" in missing.output


def test_growth_without_versions_and_with_bad_agents(settings):
    """An agent with no versions says so; invalid or unknown ids are clear errors."""
    empty = _arena("growth", "pong")
    assert empty.exit_code == 0
    assert "pong has no MEMORY.md versions yet" in empty.output
    bad = _arena("growth", "../ping")
    assert bad.exit_code == 1
    assert "invalid agent id" in bad.output
    unknown = _arena("growth", "nobody")
    assert unknown.exit_code == 1
    assert "no agent 'nobody'" in unknown.output


def test_logs_prints_a_daily_log(settings):
    """`arena logs` prints a day's log, today by default, and says when there is none."""
    _note(settings, "Ask for the expected load first", DAY1)
    shown = _arena("logs", "ping", "--date", "2026-01-05")
    assert shown.exit_code == 0, shown.output
    assert "- 10:15 [lesson] Ask for the expected load first (source: team/1-0)" in shown.output
    today = _arena("logs", "ping")
    assert today.exit_code == 0
    assert f"ping has no log for {datetime.now(UTC).date().isoformat()}" in today.output
    assert "logs exist for 2026-01-05" in today.output
    bad_date = _arena("logs", "ping", "--date", "yesterday")
    assert bad_date.exit_code == 2
    assert _arena("logs", "Ping!").exit_code == 1


def test_summary_prints_the_current_summary(settings):
    """`arena summary` prints the group's summary, or says there is none yet."""
    none = _arena("summary", "team")
    assert none.exit_code == 0
    assert "group 'team' has no summary yet" in none.output
    engine = make_engine(settings.effective_database_url)
    try:
        _post(engine, 1, "We are building a booking site for a dentist.")
        _post(engine, 2, "After some thought we decided to use PostgreSQL.")
        asyncio.run(run_summary(settings, engine, OfflineProvider(), "team", None, "manual", NOW))
    finally:
        engine.dispose()
    shown = _arena("summary", "team")
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("# Summary of team\n")
    assert "we decided to use PostgreSQL" in shown.output
    bad = _arena("summary", "Not A Group")
    assert bad.exit_code == 1
    assert "not a valid group id" in bad.output
