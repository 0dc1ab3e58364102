"""The memory and growth inspector in a real headless Chromium, against `arena up`, with the
CLI agreeing: an agent's page after two heartbeats (two points, a diff), a hand edit of
MEMORY.md from the page (a version `arena growth` lists) and one carrying an API key (refused
with the reason), a memory corrected from the memory browser (`arena memory show` reports it
superseded, with the link), forgotten and restored.

Screenshots are saved under ``test-artifacts/screenshots/`` (not committed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.arena_helpers import stop_process
from tests.browser import console_env, needs_chromium, run_arena, start_arena

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.slow,
    needs_chromium,
]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return console_env(tmp_path_factory, "inspector")


@pytest.fixture(scope="module")
def console(env: dict[str, str]) -> Iterator[str]:
    """`arena up` with its console, the architect having distilled its log twice."""
    up = start_arena(["up"], env, "arena: ready")
    try:
        for decision in ("use JWT for the API tokens", "keep the API backwards compatible"):
            run_arena(env, "post", "team", f"@architect we decided to {decision}", "--wait", "30")
            run_arena(env, "heartbeat", "architect", "--force", "--wait", "60")
        yield f"http://127.0.0.1:{env['ARENA_WEB_PORT']}"
    finally:
        stop_process(up)


def _growth(env: dict[str, str]) -> list[dict[str, object]]:
    return json.loads(run_arena(env, "growth", "architect", "--json").stdout)["versions"]


def test_the_agent_page_shows_each_version_and_a_diff(console: str, page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/agents/architect")
    points = page.locator("svg.growth circle")
    expect(points).to_have_count(2)
    points.nth(1).click()
    expect(page.locator("#version-title")).to_contain_text("Version 2")
    expect(page.locator("#version-diff .add").first).to_contain_text("backwards compatible")
    expect(page.locator("#log li").first).to_contain_text("team")


def test_a_hand_edit_is_a_version_arena_growth_lists(
    console: str, env: dict[str, str], page
) -> None:
    expect = playwright.expect
    before = len(_growth(env))
    page.goto(f"{console}/agents/architect")
    expect(page.locator("svg.growth circle")).to_have_count(before)
    page.click("#edit")
    page.fill("#edit-text", "- [decision] Use JWT for the API tokens (hand edit)\n")
    page.click("#edit-form button[type=submit]")
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(page.locator("#memory-text")).to_contain_text("(hand edit)")
    versions = _growth(env)
    assert len(versions) == before + 1
    assert versions[-1]["trigger"] == "hand edit"


def test_a_hand_edit_carrying_a_key_is_refused_with_the_reason(
    console: str, env: dict[str, str], page
) -> None:
    expect = playwright.expect
    before = _growth(env)
    page.goto(f"{console}/agents/architect")
    page.click("#edit")
    page.fill("#edit-text", "- [fact] the key is sk-ant-api03-" + "a1B2c3D4" * 8 + "\n")
    page.click("#edit-form button[type=submit]")
    expect(page.locator("#edit-error")).to_be_visible()
    assert "sk-ant" not in page.locator("#edit-error").inner_text()
    assert _growth(env) == before


def test_a_memory_is_corrected_forgotten_and_restored(
    console: str, env: dict[str, str], page
) -> None:
    expect = playwright.expect
    page.goto(f"{console}/memory?q=JWT&group=team")
    row = page.locator("#memories tbody tr", has_text="JWT").first
    expect(row).to_be_visible()
    old_id = row.locator("td.num").inner_text()
    row.locator("button", has_text="Edit").click()
    page.fill("tr.editing textarea", "We use JWT with 15-minute tokens for the API")
    page.click("tr.editing button[type=submit]")
    expect(page.locator("#detail")).to_contain_text(f"replaces #{old_id}")
    shown = json.loads(run_arena(env, "memory", "show", old_id, "--json").stdout)
    assert shown["status"] == "superseded"
    new_id = shown["superseded_by"]
    assert new_id is not None

    page.goto(f"{console}/memory?group=team")
    row = page.locator(f"#mem-{new_id}")
    row.locator("button", has_text="Forget").click()
    expect(page.locator(f"#mem-{new_id}")).to_have_count(0)
    page.goto(f"{console}/memory?group=team&status=archived")
    page.locator(f"#mem-{new_id}").locator("button", has_text="Restore").click()
    page.goto(f"{console}/memory?group=team")
    expect(page.locator(f"#mem-{new_id}")).to_be_visible()
    restored = json.loads(run_arena(env, "memory", "show", str(new_id), "--json").stdout)
    assert restored["status"] == "active"


def test_the_context_inspector_shows_layers_budgets_and_recall(console: str, page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/context?agent=architect&group=team&message=which+tokens+for+the+API")
    expect(page.locator("#result")).to_be_visible()
    recall_row = page.locator("#layers tr", has_text="recall")
    expect(recall_row).to_contain_text("1,400")  # its budget
    expect(page.locator("#recall tbody")).to_contain_text("kept")
    page.click("text=Per-turn tail")
    expect(page.locator("#tail")).to_contain_text("JWT")


def test_summarize_now_from_the_room(console: str, env: dict[str, str], page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/groups/team")
    expect(page.locator("#live")).to_have_text("live")
    page.fill("#text", "hello everyone, nice weather today")  # nothing to summarise at once
    page.press("#text", "Enter")
    expect(page.locator("li.msg.agent", has_text="nice weather")).to_have_count(1)
    page.click("#summary summary")
    page.click("#summarize")
    note = page.locator("#summary-note")
    expect(note).not_to_have_text("summarizing…")
    expect(note).to_contain_text("written")
    printed = run_arena(env, "summary", "team").stdout.strip()
    expect(page.locator("#summary-text")).to_contain_text(printed.splitlines()[0])


def test_a_past_replys_report_from_the_room(console: str, page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/groups/team")
    reply = page.locator("li.msg.agent").first
    reply.locator("button", has_text="context cost").click()
    reply.locator("a", has_text="the whole report").click()
    expect(page.locator("#result-title")).to_contain_text("its context as recorded")
    expect(page.locator("#layers tr", has_text="history")).to_be_visible()
    expect(page.locator("#recall tbody tr").first).to_be_visible()


def test_an_unknown_reply_has_no_report(console: str) -> None:
    response = httpx.get(f"{console}/api/messages/no-such-id/report", timeout=10)
    assert response.status_code == 404
    assert "no reply" in response.json()["error"]
