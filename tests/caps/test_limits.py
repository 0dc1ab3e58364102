"""Daily spending caps: the pure rule, prices, the agents' own caps and the caps' settings."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from orchestrator.caps.limits import (
    Cap,
    CapLimits,
    Price,
    Scope,
    Unit,
    check,
    cost_micro_usd,
    near,
    next_midnight,
)
from orchestrator.core.agents import load_agents
from orchestrator.core.models import Usage
from orchestrator.errors import AgentDefinitionError, ConfigError
from orchestrator.settings import load_settings

BERLIN = ZoneInfo("Europe/Berlin")
NOON = datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN)


def _group_cap(limit: int) -> Cap:
    return Cap(scope=Scope.GROUP, name="demo", unit=Unit.TOKENS, limit=limit)


def test_a_call_under_every_cap_may_go_ahead():
    """Used plus the estimate at or under the cap: no breach."""
    caps = (_group_cap(2000),)
    assert check(caps, {"tokens:group:demo": 1500}, {Unit.TOKENS: 500}, NOON) is None


def test_a_call_that_would_pass_a_cap_is_refused_with_when_it_resets():
    """The breach names the cap, what is used, the estimate and the next local midnight."""
    caps = (_group_cap(2000),)
    breach = check(caps, {"tokens:group:demo": 1900}, {Unit.TOKENS: 200}, NOON)
    assert breach is not None
    assert (breach.cap.key, breach.used, breach.estimate) == ("tokens:group:demo", 1900, 200)
    assert breach.resets_at == datetime(2026, 3, 29, 0, 0, tzinfo=BERLIN)
    assert breach.describe() == (
        "this turn (about 200 tokens) would pass the daily budget "
        "(group demo: 1,900 of 2,000 tokens used); resets 2026-03-29 00:00 CET"
    )


def test_a_reached_cap_refuses_even_an_empty_call():
    """Once used equals the cap nothing more goes, whatever the estimate: "reached"."""
    breach = check((_group_cap(10),), {"tokens:group:demo": 10}, {Unit.TOKENS: 5}, NOON)
    assert breach is not None
    assert breach.describe().startswith("daily budget reached (group demo: 10 of 10 tokens);")
    dollars = Cap(scope=Scope.AGENT, name="qa", unit=Unit.USD, limit=1_000_000)
    breach = check((dollars,), {"usd:agent:qa": 990_000}, {Unit.USD: 20_000}, NOON)
    assert breach is not None
    assert breach.describe().startswith(
        "this turn (about $0.02) would pass the daily budget (agent qa: $0.99 of $1.00 used)"
    )


def test_a_small_dollar_cap_passed_does_not_read_as_reached_exactly():
    """Under $1 the amounts are shown to a hundredth of a cent: $0.0054 of a $0.0050 cap."""
    small = Cap(scope=Scope.ALL, name="*", unit=Unit.USD, limit=5_000)
    breach = check((small,), {"usd:all:*": 5_400}, {Unit.USD: 100}, NOON)
    assert breach is not None
    assert breach.describe().startswith("daily budget reached (all agents: $0.0054 of $0.0050);")


def test_midnight_follows_the_zone_across_a_clock_change():
    """The night the clocks go forward the day is 23 hours long and still ends at 00:00."""
    midnight = next_midnight(datetime(2026, 3, 29, 12, 0, tzinfo=BERLIN))
    assert midnight == datetime(2026, 3, 30, 0, 0, tzinfo=BERLIN)
    assert midnight.utcoffset() is not None
    assert midnight.astimezone(UTC).hour == 22


def test_an_agents_own_cap_wins_over_the_shared_one():
    """``caps`` in an agent's YAML replaces ``ARENA_CAP_AGENT_*`` for that agent only."""
    limits = CapLimits(agent_tokens=1000, group_usd=2.5, agents={"tester": {"tokens_per_day": 50}})
    by_key = {c.key: c.limit for c in limits.for_call("tester", "demo")}
    assert by_key == {"tokens:agent:tester": 50, "usd:group:demo": 2_500_000}
    assert {c.key: c.limit for c in limits.for_call("architect", "demo")}[
        "tokens:agent:architect"
    ] == 1000
    assert not CapLimits().any
    assert CapLimits(agents={"x": {"usd_per_day": 1}}).any


def test_cost_is_priced_per_million_tokens_in_micro_dollars():
    """$3 per Mtok input and $15 output: 1,000 in and 100 out cost 4,500 micro-dollars."""
    price = Price(input=3, output=15, cache_read=0.3, cache_write=3.75)
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=1000)
    assert cost_micro_usd(price, usage) == 3000 + 1500 + 300


def test_a_cap_80_percent_used_is_near():
    """Warnings start at 80 % of a cap."""
    caps = (_group_cap(1000),)
    assert near(caps, {"tokens:group:demo": 799}) == ()
    assert near(caps, {"tokens:group:demo": 800}) == caps


def test_caps_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    """Unset or empty means no cap; prices come as JSON; a bad price is one clear line."""
    monkeypatch.setenv("ARENA_CAP_GROUP_TOKENS_PER_DAY", "2000")
    monkeypatch.setenv("ARENA_CAP_USD_PER_DAY", "")
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"m": {"input": 1, "output": 2}}')
    settings = load_settings()
    assert settings.cap_group_tokens_per_day == 2000
    assert settings.cap_usd_per_day is None
    assert settings.model_prices["m"].output == 2
    monkeypatch.setenv("ARENA_CAP_AGENT_USD_PER_DAY", "-1")
    with pytest.raises(ConfigError, match="ARENA_CAP_AGENT_USD_PER_DAY"):
        load_settings()


def test_default_prices_cover_the_shipped_agents_models():
    """Every model agents/*.yaml names has a price by default."""
    settings = load_settings()
    repo = Path(__file__).resolve().parents[2]
    for agent in load_agents(repo / "agents"):
        assert agent.model in settings.model_prices


def test_an_agent_yaml_may_set_its_own_caps(tmp_path: Path):
    """``caps: {tokens_per_day, usd_per_day}`` is read; a bad value names the field."""
    head = "id: solo\nname: Solo\nrole: r\nmodel: m\ndefault: true\n"
    (tmp_path / "solo.yaml").write_text(head + "caps: {tokens_per_day: 500, usd_per_day: 1}\n")
    assert load_agents(tmp_path)[0].caps == {"tokens_per_day": 500, "usd_per_day": 1.0}
    (tmp_path / "solo.yaml").write_text(head + "caps: {tokens_per_day: 0}\n")
    with pytest.raises(AgentDefinitionError, match=r"caps\.tokens_per_day"):
        load_agents(tmp_path)
    (tmp_path / "solo.yaml").write_text(head + "caps: {tokens: 5}\n")
    with pytest.raises(AgentDefinitionError, match="unknown field"):
        load_agents(tmp_path)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ARENA_CAP_AGENT_USD_PER_DAY", "inf"),
        ("ARENA_CAP_USD_PER_DAY", "1e400"),
        ("ARENA_CAP_GROUP_USD_PER_DAY", "nan"),
        ("ARENA_CAP_USD_PER_DAY", "2000000000"),
        ("ARENA_CAP_TOKENS_PER_DAY", "1e400"),
        ("ARENA_CAP_AGENT_TOKENS_PER_DAY", "10000000000000"),
    ],
)
def test_an_endless_or_absurd_cap_is_refused_at_start(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
):
    """A cap must be finite and at most 10**12 tokens or $10**9 a day: one line naming it."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name}: ") as caught:
        load_settings()
    assert "\n" not in str(caught.value)


def test_an_endless_cap_in_an_agent_yaml_names_its_file_and_field(tmp_path: Path):
    """``caps: {usd_per_day: .inf}`` fails when the agents load, not in every answer."""
    head = "id: solo\nname: Solo\nrole: r\nmodel: m\ndefault: true\n"
    for caps in ("{usd_per_day: .inf}", "{usd_per_day: .nan}", "{tokens_per_day: 1e400}"):
        (tmp_path / "solo.yaml").write_text(head + f"caps: {caps}\n")
        with pytest.raises(AgentDefinitionError, match=r"solo\.yaml: caps\.\w+_per_day: "):
            load_agents(tmp_path)
    with pytest.raises(ValueError, match="agent_usd: inf is not a daily cap"):
        CapLimits(agent_usd=float("inf"))
    with pytest.raises(ValueError, match=r"solo.usd_per_day"):
        CapLimits(agents={"solo": {"usd_per_day": float("nan")}})


def test_a_dollar_cap_needs_a_model_with_a_price(monkeypatch: pytest.MonkeyPatch):
    """With every model free a dollar cap could never be reached: refused at start; a bad
    price names the model and the field."""
    monkeypatch.setenv("ARENA_CAP_USD_PER_DAY", "5")
    monkeypatch.setenv("ARENA_MODEL_PRICES", "{}")
    with pytest.raises(ConfigError, match=r"^ARENA_CAP_USD_PER_DAY: needs prices: set ARENA_MOD"):
        load_settings()
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"offline": {"input": 0, "output": 0}}')
    with pytest.raises(ConfigError, match="needs prices"):
        load_settings()
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"offline": {"input": 1}}')
    with pytest.raises(ConfigError, match=r"^ARENA_MODEL_PRICES: offline: output: Field required"):
        load_settings()
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"m": {"input": 1, "output": "inf"}}')
    with pytest.raises(ConfigError, match=r"^ARENA_MODEL_PRICES: m: output: "):
        load_settings()
    monkeypatch.setenv("ARENA_MODEL_PRICES", '{"m": {"input": 1, "output": 2}}')
    assert load_settings().cap_usd_per_day == 5


def test_recorded_caps_read_back_as_they_were():
    """The JSON a daemon records its caps as gives the same caps back."""
    limits = CapLimits(group_tokens=2000, all_usd=2.5, agents={"qa": {"usd_per_day": 1.0}})
    assert CapLimits.from_json(limits.as_json()) == limits
    for bad in ("[]", '{"group_tokens": "x"}', '{"group_tokens": -1}', '{"nope": 1}'):
        with pytest.raises(ValueError, match=r"caps|group_tokens"):
            CapLimits.from_json(bad)
