"""``GET /api/budget`` against a real console and Redis: the same report as `arena budget`."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.core.wire import spend_key
from orchestrator.settings import Settings
from tests.arena_helpers import running_daemon
from tests.web_helpers import console_server, console_settings


def test_get_budget_shows_todays_spending_against_the_caps(
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


def _console_report(settings: Settings) -> tuple[dict[str, Any], str]:
    with console_server(settings) as base, httpx.Client(base_url=base, timeout=10) as api:
        return api.get("/api/budget").json(), api.get("/metrics").text


async def test_the_console_shows_the_caps_the_running_daemon_enforces(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """A console started without the daemon's cap still reports it (`caps_from: daemon`), in
    `/api/budget` and in `/metrics`' arena_spend_cap; with no daemon running, its own."""
    capped = console_settings(
        tmp_path, embedded_redis_url, mqtt_url=embedded_mqtt_url, cap_group_tokens_per_day=2000
    )
    plain = console_settings(tmp_path, embedded_redis_url, mqtt_url=embedded_mqtt_url)
    today = datetime.now(plain.zone).date().isoformat()
    with redis.Redis.from_url(embedded_redis_url) as client:
        client.hset(spend_key(today), mapping={"tokens:group:demo": 1500})
    async with running_daemon(capped):
        report, metrics = await asyncio.to_thread(_console_report, plain)
    assert (report["caps_set"], report["caps_from"]) == (True, "daemon")
    (demo,) = [r for r in report["rows"] if r["scope"] == "group"]
    assert demo["today"]["tokens_cap"] == 2000
    assert 'arena_spend_cap{name="demo",scope="group",unit="tokens"} 2000.0' in metrics
    report, metrics = await asyncio.to_thread(_console_report, plain)
    assert (report["caps_set"], report["caps_from"]) == (False, "settings")
    assert 'arena_spend_cap{name="demo"' not in metrics
