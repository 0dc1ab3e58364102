"""`arena context` is a dry run: previewing a turn writes nothing, taking it marks what it
recalled as used."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.core.context.plan import LayerBudgets
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.settings import Settings
from tests.arena_helpers import make_pipeline, make_settings, set_environment
from tests.fakes import anthropic_provider

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
QUESTION = "@ping when does the code freeze start?"


async def _take_the_turn(settings, engine, base_url: str) -> None:
    llm = anthropic_provider(api_key="test", base_url=base_url, timeout_s=5, max_retries=0)
    pipeline, _outbox, _events = make_pipeline(
        settings, HistoryStore(engine), llm, clock=lambda: T0
    )
    message = ChatMessage(
        id="1000-0",
        group="plans",
        sender="alex",
        kind=MessageKind.HUMAN,
        text=QUESTION,
        created_at=T0,
    )
    await pipeline.handle(message)
    await llm.aclose()


async def test_a_preview_leaves_last_used_alone_and_a_turn_sets_it(
    tmp_path: Path, monkeypatch, fake_llm
):
    """`arena context` recalls a memory without touching its last_used_at; the real turn
    on the same message records it."""
    settings = make_settings(
        tmp_path, "redis://127.0.0.1:1", "mqtt://127.0.0.1:1", fake_llm.base_url
    )
    set_environment(monkeypatch, settings)
    engine = make_engine(settings.effective_database_url)
    memory = SessionMemory(engine)
    entry = memory.write(
        NewMemory(
            scope="session",
            scope_id="plans",
            type="decision",
            content="The code freeze starts on the 20th",
            now=T0,
            confidence=0.9,
            agent="ping",
            group_id="plans",
            source_message_id="999-0",
        )
    ).record.id
    try:
        preview = CliRunner().invoke(
            main, ["context", "ping", "plans", "--message", QUESTION, "--json"]
        )
        assert preview.exit_code == 0, preview.output
        cited = [c["id"] for c in json.loads(preview.output)["report"]["citations"]]
        assert cited == [entry]  # the preview did recall it
        assert memory.get(entry).last_used_at is None
        await _take_the_turn(settings, engine, fake_llm.base_url)
        assert memory.get(entry).last_used_at == T0
    finally:
        engine.dispose()


def test_a_turn_is_planned_with_the_settings_budgets_and_no_others(tmp_path: Path, monkeypatch):
    """`arena context` plans with the layer budgets Settings defines; the core has no set of
    its own that a plan could fall back to."""
    settings = make_settings(tmp_path, "redis://127.0.0.1:1", "mqtt://127.0.0.1:1", None)
    set_environment(monkeypatch, settings)
    result = CliRunner().invoke(main, ["context", "ping", "plans", "--json"])
    assert result.exit_code == 0, result.output
    budgets = json.loads(result.output)["budgets"]
    defaults = {name: Settings.model_fields[f"budget_{name}"].default for name in budgets}
    assert (
        budgets
        == defaults
        == {
            "identity": 700,
            "summary": 500,
            "memory_md": 800,
            "logs": 600,
            "recall": 1400,
        }
    )
    with pytest.raises(TypeError, match="missing 5 required keyword-only arguments"):
        LayerBudgets()  # type: ignore[call-arg]
