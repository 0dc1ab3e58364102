"""``GET /api/budget`` against a real console and Redis: the same report as `arena budget`."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import redis
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.core.wire import spend_key
from tests.web_helpers import console_server, console_settings


def test_api_budget_shows_todays_spending_against_the_caps(
    tmp_path: Path, embedded_redis_url: str, monkeypatch: pytest.MonkeyPatch
):
    """Counters written for today come back per group with the cap, as the CLI's JSON."""
    settings = console_settings(tmp_path, embedded_redis_url, cap_group_tokens_per_day=2000)
    today = datetime.now(settings.zone).date().isoformat()
    with redis.Redis.from_url(embedded_redis_url) as client:
        client.hset(
            spend_key(today),
            mapping={"tokens:group:demo": 1500, "usd:group:demo": 2500, "tokens:all:*": 1500},
        )
    with console_server(settings) as base, httpx.Client(base_url=base, timeout=10) as api:
        response = api.get("/api/budget")
    assert response.status_code == 200
    report = response.json()
    demo = next(r for r in report["rows"] if r["scope"] == "group")
    assert demo["name"] == "demo"
    assert demo["today"] == {"tokens": 1500, "usd": 0.0025, "tokens_cap": 2000, "usd_cap": None}
    assert report["totals"][0] == {"day": today, "tokens": 1500, "usd": 0.0}
    assert len(report["totals"]) == 7

    for name, value in {
        "REDIS_URL": embedded_redis_url,
        "ARENA_AGENTS_DIR": str(settings.agents_dir),
        "ARENA_DATA_DIR": str(settings.data_dir),
        "ARENA_CAP_GROUP_TOKENS_PER_DAY": "2000",
    }.items():
        monkeypatch.setenv(name, value)
    shown = CliRunner().invoke(main, ["budget", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["rows"] == report["rows"]
