"""The memory tools offline, through a real daemon: asked what was decided, the shipped
architect searches memory and quotes the decision with its citation (the issue's demo)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from tests.arena_helpers import REPO, make_settings, running_daemon


async def test_offline_architect_searches_memory_and_cites_the_decision(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch
):
    """ "we decided to use Postgres", then "@architect what did we decide about the database?":
    the reply quotes the stored decision with its id and citation, and its meta in
    ``arena history --json`` lists the memory_search call and both steps' tokens."""
    settings = make_settings(
        tmp_path, embedded_redis_url, embedded_mqtt_url, None, agents_dir=REPO / "agents"
    )
    async with running_daemon(settings):
        client = ArenaClient(embedded_redis_url)
        _, first = await asyncio.to_thread(
            client.post_and_wait, "demo", "we decided to use Postgres", "alex", 20
        )
        _, replies = await asyncio.to_thread(
            client.post_and_wait,
            "demo",
            "@architect what did we decide about the database?",
            "alex",
            20,
        )
        client.close()
    (reply,) = replies
    assert reply.sender == "architect"
    assert "I searched memory (memory_search) and found:" in reply.text
    assert "we decided to use Postgres" in reply.text
    assert f"cites message {first[0].id}" in reply.text
    assert "about the database?" not in reply.text.split("\n", 1)[1]  # not the question itself
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    monkeypatch.setenv("ARENA_DATA_DIR", str(settings.data_dir))
    shown = CliRunner().invoke(main, ["history", "demo", "--json"])
    assert shown.exit_code == 0, shown.output
    rows = [json.loads(line) for line in shown.output.splitlines() if line.strip()]
    meta = next(r for r in rows if r["id"] == reply.id)["meta"]
    (call,) = meta["tools"]["calls"]
    assert call["name"] == "memory_search"
    assert call["line"] == 'memory_search("what did we decide about the database") → 1 hit'
    assert not call["is_error"]
    assert len(meta["tools"]["steps"]) == 2
    plain = CliRunner().invoke(main, ["history", "demo"])
    assert plain.exit_code == 0, plain.output
    assert (
        '  tool: memory_search("what did we decide about the database") → 1 hit\n' in plain.output
    )
    assert "  2 model calls (tokens in+out: " in plain.output
