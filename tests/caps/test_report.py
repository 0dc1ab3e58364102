"""What ``arena budget`` and ``GET /api/budget`` report: today against the caps, and the week."""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

from orchestrator.caps.limits import CapLimits
from orchestrator.caps.report import cap_report

NOON = datetime(2026, 3, 28, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))


def test_the_report_puts_today_against_the_caps_and_sums_the_week():
    """Rows per agent, group, model and all; totals per day, today first."""
    counters = [
        (date(2026, 3, 28), {"tokens:group:demo": 1500, "tokens:all:*": 1500, "usd:all:*": 10}),
        (date(2026, 3, 27), {"tokens:group:demo": 700, "tokens:all:*": 700}),
    ]
    report = cap_report(counters, CapLimits(group_tokens=2000), NOON).as_json()
    demo = next(r for r in report["rows"] if r["scope"] == "group")
    assert demo["today"] == {"tokens": 1500, "usd": 0.0, "tokens_cap": 2000, "usd_cap": None}
    assert demo["last_days"]["tokens"] == 2200
    assert [t["tokens"] for t in report["totals"]] == [1500, 700]
    assert report["resets_at"] == "2026-03-29T00:00:00+01:00"


def test_an_agents_own_cap_has_a_row_before_it_spends_anything():
    """An agent with its own cap, and everyone's cap, are rows at 0 before any call."""
    limits = CapLimits(all_usd=5.0, agents={"developer": {"tokens_per_day": 9000}})
    report = cap_report([(date(2026, 3, 28), {})], limits, NOON).as_json()
    rows = {(r["scope"], r["name"]): r["today"] for r in report["rows"]}
    assert rows[("agent", "developer")] == {
        "tokens": 0, "usd": 0.0, "tokens_cap": 9000, "usd_cap": None,
    }  # fmt: skip
    assert rows[("all", "*")]["usd_cap"] == 5.0
    assert len(rows) == 2
