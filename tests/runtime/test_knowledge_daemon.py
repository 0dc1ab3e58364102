"""Knowledge end to end, as a person meets it: `arena knowledge add --group demo docs/`, a
question posted to the running daemon is answered citing the passage, the file is edited, and
the next answer (the daemon refreshed the index on its own) gives the new text; the stored
reply records which passage it was given and why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from tests.arena_helpers import make_settings, running_daemon, set_environment

DOC = """# Handbook

## Deploying

To ship a release, run `make deploy` from the main branch; it tags the commit first.
"""


async def _ask(redis_url: str, text: str) -> str:
    client = ArenaClient(redis_url)
    try:
        _, replies = await asyncio.to_thread(client.post_and_wait, "demo", text, "alex", 20)
    finally:
        client.close()
    assert len(replies) == 1
    return replies[0].text


async def test_an_answer_cites_the_passage_and_follows_an_edit(
    tmp_path: Path, redis_url: str, mqtt_broker: str, monkeypatch: pytest.MonkeyPatch
):
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "deploy.md"
    page.write_text(DOC, encoding="utf-8")
    settings = make_settings(tmp_path, redis_url, mqtt_broker, None, knowledge_poll_s=0.2)
    set_environment(monkeypatch, settings)
    added = CliRunner().invoke(main, ["knowledge", "add", "--group", "demo", str(docs)])
    assert added.exit_code == 0, added.output
    assert "added docs (folder, trusted) for group demo" in added.output
    async with running_daemon(settings):
        first = await _ask(redis_url, "@ping how do we ship a release?")
        assert "From docs/deploy.md#L1-5@" in first
        assert "run `make deploy` from the main branch" in first
        page.write_text(DOC.replace("`make deploy`", "`make release`"), encoding="utf-8")
        for _ in range(100):  # the daemon's own check, every 0.2 s here
            second = await _ask(redis_url, "@ping how do we ship a release again?")
            if "make release" in second:
                break
            await asyncio.sleep(0.1)
        assert "run `make release` from the main branch" in second
        assert "make deploy" not in second
    history = CliRunner().invoke(main, ["history", "demo", "--json"])
    rows = [json.loads(line) for line in history.output.splitlines()]
    last = [r for r in rows if r["sender"] == "ping"][-1]
    (cited,) = [
        c for c in last["meta"]["context"]["citations"] if c["trust"].startswith("knowledge")
    ]
    assert cited["ref"].startswith("docs/deploy.md#L1-5@")
    assert cited["why"].startswith("matched ship, release")


async def test_the_daemon_embeds_new_chunks_and_a_question_finds_one_by_meaning(
    tmp_path: Path, redis_url: str, mqtt_broker: str, monkeypatch: pytest.MonkeyPatch
):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "office.md").write_text(
        DOC + "\n## Holidays\n\nThe office is closed between Christmas and New Year.\n",
        encoding="utf-8",
    )
    settings = make_settings(tmp_path, redis_url, mqtt_broker, None, knowledge_poll_s=0.2)
    set_environment(monkeypatch, settings)
    cli = CliRunner()
    monkeypatch.setattr("orchestrator.cli.knowledge.EMBED_HERE_S", 0.0)  # all left to the daemon
    added = cli.invoke(main, ["knowledge", "add", "--group", "demo", str(docs)])
    assert added.exit_code == 0, added.output
    assert "by meaning once a running daemon has embedded its other 2 new chunks" in added.output

    def listed() -> dict[str, object]:
        return json.loads(cli.invoke(main, ["knowledge", "list", "--json"]).output)

    assert listed()["embedded"] == 0
    async with running_daemon(settings):
        for _ in range(300):
            if listed()["embedded"] == listed()["chunks"]:
                break
            await asyncio.sleep(0.1)
        assert listed()["embedded"] == listed()["chunks"] == 2
        # not one word in common with the passage: found by its meaning alone
        reply = await _ask(redis_url, "@ping is the workplace open during the festive season?")
    assert "From docs/office.md#L7-9@" in reply
    assert "closed between Christmas and New Year" in reply
    history = cli.invoke(main, ["history", "demo", "--json"])
    last = [json.loads(line) for line in history.output.splitlines()][-1]
    (cited,) = [
        c for c in last["meta"]["context"]["citations"] if c["trust"].startswith("knowledge")
    ]
    assert cited["why"].startswith("close in meaning; meaning 0.")
