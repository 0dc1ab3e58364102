"""The spending caps and the memory tools in the console, in a real headless Chromium.

Against `arena up` with a daily group cap: the status page's budget panel shows the group's row
with its cap, as `arena budget` counts it, and the context inspector of a reply that searched
memory lists the search and its two model calls. Against a console whose spending was counted
as the daemon counts it: rows at 80 % and 100 % of a cap are marked; with no cap, a hint.

Screenshots are saved under ``test-artifacts/screenshots/`` (not committed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from redis import asyncio as aioredis

from orchestrator.adapters.spend import SpendLedger, Spent
from tests.arena_helpers import stop_process
from tests.browser import console_env, needs_chromium, run_arena, start_arena
from tests.web_helpers import console_server, console_settings

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.slow,
    needs_chromium,
]

GROUP = "browser-budget"
GROUP_CAP = 12_000  # tokens a day; two offline turns take about 900


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {
        **console_env(tmp_path_factory, "budget"),
        "ARENA_CAP_GROUP_TOKENS_PER_DAY": str(GROUP_CAP),
    }


@pytest.fixture(scope="module")
def console(env: dict[str, str]) -> Iterator[str]:
    """`arena up` with its console and a group cap; the architect has answered twice in
    ``GROUP``, the second time after searching memory."""
    up = start_arena(["up"], env, "arena: ready")
    try:
        for text in (
            "we decided to use Postgres",
            "@architect what did we decide about the database?",
        ):
            run_arena(env, "post", GROUP, text, "--wait", "30")
        yield f"http://127.0.0.1:{env['ARENA_WEB_PORT']}"
    finally:
        stop_process(up)


def _row(report: dict[str, Any], scope: str, name: str) -> dict[str, Any]:
    return next(r for r in report["rows"] if r["scope"] == scope and r["name"] == name)


def test_the_status_page_shows_the_capped_groups_spending(
    console: str, env: dict[str, str], page
) -> None:
    """The group's row reads 'N / 12,000' tokens today, as `arena budget --json` counts it."""
    expect = playwright.expect
    shown = json.loads(run_arena(env, "budget", "--json").stdout)
    used = _row(shown, "group", GROUP)["today"]["tokens"]
    assert 0 < used < GROUP_CAP * 0.8
    page.goto(f"{console}/status")
    row = page.locator(f'#budget tbody tr[data-scope="group"][data-name="{GROUP}"]')
    expect(row).to_contain_text(f"{used:,} / {GROUP_CAP:,}")
    expect(row.locator("td.mark")).to_have_text(f"{100 * used // GROUP_CAP} %")
    expect(row).not_to_have_class("budget-near")
    expect(page.locator('#budget tbody tr[data-scope="model"] td.mark')).to_have_text("\u2013")
    expect(page.locator("#budget-reset")).to_contain_text("Caps reset")
    expect(page.locator("#budget-hint")).to_be_hidden()


def test_the_inspector_lists_a_replys_memory_search_and_its_steps(console: str, page) -> None:
    """From the room's reply to its report: the memory_search call and the 2 model calls."""
    expect = playwright.expect
    page.goto(f"{console}/groups/{GROUP}")
    reply = page.locator("li.msg.agent", has_text="memory_search")
    expect(reply).to_have_count(1)
    reply.locator("button", has_text="context cost").click()
    reply.locator("a", has_text="the whole report").click()
    expect(page.locator("#result-title")).to_contain_text("its context as recorded")
    calls = page.locator("#tool-calls tbody tr")
    expect(calls).to_have_count(1)
    expect(calls.first).to_contain_text('memory_search("what did we decide about the database")')
    expect(calls.first).not_to_have_class("tool-error")
    steps = page.locator("#tool-steps tbody tr.step")
    expect(steps).to_have_count(2)
    expect(page.locator("#tools-summary")).to_have_text("1 tool call over 2 model calls")


def test_a_reply_without_tools_hides_the_section(console: str, page) -> None:
    """The first reply called no tool: no "Memory tools" section in its report."""
    expect = playwright.expect
    room = httpx.get(f"{console}/api/groups/{GROUP}/messages", timeout=10).json()
    first = next(m for m in room["messages"] if m["kind"] == "agent")
    page.goto(f"{console}/context?reply={first['id']}")
    expect(page.locator("#result")).to_be_visible()
    expect(page.locator("#tools")).to_be_hidden()


def _call(agent: str, group: str, tokens: int, micro_usd: int) -> Spent:
    return Spent(agent=agent, group=group, model="claude-test", tokens=tokens, micro_usd=micro_usd)


def _spend(redis_url: str, zone: ZoneInfo, *calls: Spent) -> None:
    """Count ``calls`` as the daemon does after each model call (in a thread of its own:
    Playwright's loop runs in this one)."""

    async def count() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            ledger = SpendLedger(client, zone)
            for spent in calls:
                await ledger.settle(ledger.unchecked(datetime.now(zone)), spent)
        finally:
            await client.aclose()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, count()).result(timeout=10)


def test_rows_near_and_past_a_cap_are_marked(tmp_path: Path, embedded_redis_url: str, page) -> None:
    """At 85 % of the group cap a row is marked near it, at 100 % marked reached; the
    Refresh button shows spending counted since the page was opened."""
    expect = playwright.expect
    settings = console_settings(
        tmp_path,
        embedded_redis_url,
        cap_group_tokens_per_day=1000,
        cap_agent_tokens_per_day=4000,
        cap_group_usd_per_day=1.0,
    )
    zone = settings.zone
    _spend(embedded_redis_url, zone, _call("helper", "alpha", 850, 5_000))
    with console_server(settings) as base:
        page.goto(f"{base}/status")
        body = page.locator("#budget tbody")
        alpha = body.locator('tr[data-scope="group"][data-name="alpha"]')
        expect(alpha).to_contain_text("850 / 1,000")
        expect(alpha).to_contain_text("$0.0050 / $1.00")
        expect(alpha).to_have_class("budget-near")
        expect(alpha.locator("td.mark")).to_have_text("\u26a0 85 % used")
        helper = body.locator('tr[data-scope="agent"][data-name="helper"]')
        expect(helper).to_contain_text("850 / 4,000")
        expect(helper.locator("td.mark")).to_have_text("21 %")

        _spend(embedded_redis_url, zone, _call("ping", "beta", 300, 1_000_000))
        page.click("#refresh")
        beta = body.locator('tr[data-scope="group"][data-name="beta"]')
        expect(beta).to_have_class("budget-over")  # by dollars: $1.00 of $1.00
        expect(beta.locator("td.mark")).to_have_text("cap reached (100 %)")
        expect(beta).to_contain_text("300 / 1,000")
        expect(body.locator('tr[data-scope="all"]')).to_contain_text("1,150")


def test_with_no_caps_the_panel_says_so(tmp_path: Path, embedded_redis_url: str, page) -> None:
    """No cap and nothing spent: "no caps set" and an empty table, and the API's caps_set."""
    expect = playwright.expect
    settings = console_settings(tmp_path, embedded_redis_url)
    with console_server(settings) as base:
        report = httpx.get(f"{base}/api/budget", timeout=10).json()
        page.goto(f"{base}/status")
        expect(page.locator("#budget-hint")).to_contain_text("No caps set")
        expect(page.locator("#budget tbody")).to_contain_text("No model calls counted")
    assert report["caps_set"] is False
    assert report["rows"] == []


def test_the_budget_api_says_a_cap_is_set(console: str) -> None:
    """``caps_set`` is true with a group cap; each group row carries it."""
    capped = httpx.get(f"{console}/api/budget", timeout=10).json()
    assert capped["caps_set"] is True
    assert _row(capped, "group", GROUP)["today"]["tokens_cap"] == GROUP_CAP
