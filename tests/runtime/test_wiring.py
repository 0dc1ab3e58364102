"""The one place settings become the team, the working values and the stores (``Wiring``,
``Tuning``, ``Team``): one set of defaults, each store built once, one agent lookup."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.core.context.plan import LayerBudgets
from orchestrator.core.routing import route
from orchestrator.errors import ValidationError
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.recall.values import RecallConfig
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings, load_settings

PLAIN = """\
id: plain
name: Plain
role: helper
model: claude-test
default: true
"""

OWN = """\
id: own
name: Own
role: reviewer
model: claude-test
max_tokens: 900
routing:
  rules:
    - name: review
      keywords: [review]
context:
  window: 50000
  recall: 321
recall:
  max_entries: 3
  require_source: true
"""


def _settings(tmp_path: Path, **extra: object) -> Settings:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "plain.yaml").write_text(textwrap.dedent(PLAIN), encoding="utf-8")
    (agents / "own.yaml").write_text(textwrap.dedent(OWN), encoding="utf-8")
    return load_settings(
        agents_dir=agents,
        workspaces_dir=tmp_path / "ws",
        data_dir=tmp_path / "data",
        **extra,
    )


def test_default_settings_are_the_values_own_defaults(tmp_path: Path):
    """With nothing set, a turn recalls and gates with exactly the values' own defaults."""
    wiring = Wiring(_settings(tmp_path))
    plain = wiring.team.get("plain")
    assert wiring.tuning.recall(plain) == RecallConfig()
    assert wiring.tuning.gate == GateConfig()


def test_an_agents_yaml_overrides_the_settings_for_that_agent_only(tmp_path: Path):
    """Settings give every agent its limits; an agent's YAML overrides its own."""
    settings = _settings(tmp_path, budget_identity=640, recall_max_entries=7)
    tuning = Wiring(settings).tuning
    team = Wiring(settings).team
    plain, own = tuning.limits(team.get("plain")), tuning.limits(team.get("own"), 1.25)
    assert plain.window == settings.context_window
    assert plain.budgets == LayerBudgets(
        identity=640,
        summary=settings.budget_summary,
        memory_md=settings.budget_memory_md,
        logs=settings.budget_logs,
        recall=settings.budget_recall,
    )
    assert (own.window, own.budgets.recall, own.budgets.identity) == (50_000, 321, 640)
    assert (own.reserved_output, own.correction) == (900, 1.25)
    assert tuning.recall(team.get("plain")).max_entries == 7
    assert tuning.recall(team.get("own")) == RecallConfig(
        relevance_floor=settings.recall_relevance_floor,
        max_entries=3,
        char_budget=settings.recall_char_budget,
        require_source=True,
    )


def test_each_store_is_built_once_and_shared(tmp_path: Path):
    """The write path, the tools, the corrections and every briefing share one of each store."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    try:
        wiring = Wiring(_settings(tmp_path), engine)
        session = wiring.session
        assert wiring.writer.session is session
        assert wiring.tools.session is session
        assert wiring.tools.recaller is wiring.recaller
        assert wiring.recaller.memory is session
        assert wiring.writer.gate == wiring.tuning.gate
        first, second = wiring.briefing(), wiring.briefing()
        assert first.recaller is second.recaller is wiring.recaller
        assert first.store is wiring.history
        assert first.personal is wiring.personal
        assert wiring.reloaded().team is not wiring.team
    finally:
        engine.dispose()


def test_the_team_is_the_one_agent_lookup_and_routes_as_the_classifier(tmp_path: Path):
    """An unknown id is refused with the ids there are; routing is the classifier's."""
    wiring = Wiring(_settings(tmp_path))
    team = wiring.team
    assert team.ids == ("own", "plain")
    with pytest.raises(ValidationError, match=r"no agent 'ghost' \(agents: own, plain\)"):
        team.get("ghost")
    for text in ("please review this", "@own hi", "hello", "@plain and @own"):
        assert team.route(text) == route(text, team.agents)
    assert team.handoffs("@own and @plain, over to you", "own") == ("plain",)


def test_stores_need_a_database(tmp_path: Path):
    """A wiring made without a database gives the team and the values, and says so for stores."""
    wiring = Wiring(_settings(tmp_path))
    assert wiring.team.ids == ("own", "plain")
    with pytest.raises(RuntimeError, match="no database"):
        _ = wiring.session
