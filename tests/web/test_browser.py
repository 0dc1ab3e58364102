"""The console in a real headless Chromium, against one `arena up` as people start it (with a
daily group cap), with the `arena` commands agreeing; each part of the console in groups of
its own.

- `arena up` prints the console's address, stops cleanly on SIGTERM and logs no request;
  `arena web` with a token beside it asks to log in and reads up's embedded Redis.
- The room: post with @-completion, a reply arriving live with why its agent answered and
  the memory tools it called; hostile text shown as text; the same history after a reload; a
  post the CLI would refuse refused inline; the groups and status pages.
- The memory and growth inspector: an agent's page after two heartbeats (two points, a diff),
  a hand edit of MEMORY.md (a version `arena growth` lists) and one carrying an API key
  (refused with the reason), a memory corrected from the memory browser (`arena memory show`
  reports it superseded), forgotten and restored; the context inspector; summarize now.
- The spending caps: the status page's budget panel shows the capped group's row as
  `arena budget` counts it; against a console whose spending was counted as the daemon counts
  it, rows at 80 % and 100 % of a cap are marked; with no cap, a hint.

A failing test saves its page as a screenshot under ``test-artifacts/screenshots/`` (not
committed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from redis import asyncio as aioredis

from orchestrator.caps.ledger import CapLedger, Spent
from tests.browser import arena, console_env, needs_chromium, start_arena, stop_arena
from tests.ports import free_port
from tests.web_helpers import console_server, console_settings

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium, pytest.mark.timeout(180)]

BUDGET_GROUP = "browser-budget"
GROUP_CAP = 12_000  # tokens a day per group; two offline turns take about 900


@dataclass(frozen=True, slots=True)
class Console:
    """The running `arena up`: its console's address and its environment."""

    url: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`arena up` with its console and a daily group cap. It printed the console's address
    before "ready"; on SIGTERM it stops with 0 and "arena: stopped", having logged no request
    line on the terminal (checked when the module is done)."""
    env = {
        **console_env(tmp_path_factory, "console"),
        "ARENA_CAP_GROUP_TOKENS_PER_DAY": str(GROUP_CAP),
    }
    url = f"http://127.0.0.1:{env['ARENA_WEB_PORT']}"
    process, printed = start_arena(["up"], env, "arena: ready")
    try:
        assert f"arena: console {url}" in printed, printed
        yield Console(url, env)
    finally:
        rest = stop_arena(process)
    assert process.returncode == 0, rest
    assert "arena: stopped" in rest
    assert "GET /api" not in rest  # no line per request on the terminal


@pytest.fixture(scope="module")
def grown(up: Console) -> Console:
    """The architect has been told two decisions in "team" and distilled its log after each."""
    for decision in ("use JWT for the API tokens", "keep the API backwards compatible"):
        arena(up.env, "post", "team", f"@architect we decided to {decision}", "--wait", "30")
        arena(up.env, "heartbeat", "architect", "--force", "--wait", "60")
    return up


@pytest.fixture(scope="module")
def spent(up: Console) -> Console:
    """The architect has answered twice in ``BUDGET_GROUP``, the second time after searching
    memory."""
    for text in (
        "we decided to use Postgres",
        "@architect what did we decide about the database?",
    ):
        arena(up.env, "post", BUDGET_GROUP, text, "--wait", "30")
    return up


def _post(page: Any, text: str) -> None:
    page.fill("#text", text)
    page.press("#text", "Escape")  # closes the @-completion, if open
    page.press("#text", "Enter")
    playwright.expect(page.locator("#text")).to_have_value("")


def _growth(env: dict[str, str]) -> list[dict[str, object]]:
    return json.loads(arena(env, "growth", "architect", "--json"))["versions"]


# The memory and growth inspector ----------------------------------------------------------------


def test_the_agent_page_shows_each_version_and_a_diff(grown: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{grown.url}/agents/architect")
    points = page.locator("svg.growth circle")
    expect(points).to_have_count(2)
    points.nth(1).click()
    expect(page.locator("#version-title")).to_contain_text("Version 2")
    expect(page.locator("#version-diff .add").first).to_contain_text("backwards compatible")
    expect(page.locator("#log li").first).to_contain_text("team")


def test_a_hand_edit_is_a_version_arena_growth_lists(grown: Console, page) -> None:
    expect = playwright.expect
    before = len(_growth(grown.env))
    page.goto(f"{grown.url}/agents/architect")
    expect(page.locator("svg.growth circle")).to_have_count(before)
    page.click("#edit")
    page.fill("#edit-text", "- [decision] Use JWT for the API tokens (hand edit)\n")
    page.click("#edit-form button[type=submit]")
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(page.locator("#memory-text")).to_contain_text("(hand edit)")
    versions = _growth(grown.env)
    assert len(versions) == before + 1
    assert versions[-1]["trigger"] == "hand edit"


def test_a_hand_edit_carrying_a_key_is_refused_with_the_reason(grown: Console, page) -> None:
    """Refused with the reason, nothing written; the status page says the hand edit was
    refused, not that the architect's heartbeat failed."""
    expect = playwright.expect
    before = _growth(grown.env)
    page.goto(f"{grown.url}/agents/architect")
    page.click("#edit")
    page.fill("#edit-text", "- [fact] the key is sk-ant-api03-" + "a1B2c3D4" * 8 + "\n")
    page.click("#edit-form button[type=submit]")
    expect(page.locator("#edit-error")).to_be_visible()
    assert "sk-ant" not in page.locator("#edit-error").inner_text()
    assert _growth(grown.env) == before

    page.goto(f"{grown.url}/status")
    row = page.locator('#status tr[data-agent="architect"]')
    expect(row.locator("td.hand-edit")).to_contain_text("hand edit refused")
    expect(row.locator("td.hand-edit")).to_contain_text("secret: looks like a credential")
    expect(row.locator("td.heartbeat")).to_contain_text("ok")
    expect(row.locator("td.heartbeat")).not_to_contain_text("failed")


def test_a_memory_is_corrected_forgotten_and_restored(grown: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{grown.url}/memory?q=JWT&group=team")
    row = page.locator("#memories tbody tr", has_text="JWT").first
    expect(row).to_be_visible()
    old_id = row.locator("td.num").inner_text()
    row.locator("button", has_text="Edit").click()
    page.fill("tr.editing textarea", "We use JWT with 15-minute tokens for the API")
    page.click("tr.editing button[type=submit]")
    expect(page.locator("#detail")).to_contain_text(f"replaces #{old_id}")
    shown = json.loads(arena(grown.env, "memory", "show", old_id, "--json"))
    assert shown["status"] == "superseded"
    new_id = shown["superseded_by"]
    assert new_id is not None

    page.goto(f"{grown.url}/memory?group=team")
    row = page.locator(f"#mem-{new_id}")
    row.locator("button", has_text="Forget").click()
    expect(page.locator(f"#mem-{new_id}")).to_have_count(0)
    page.goto(f"{grown.url}/memory?group=team&status=archived")
    page.locator(f"#mem-{new_id}").locator("button", has_text="Restore").click()
    page.goto(f"{grown.url}/memory?group=team")
    expect(page.locator(f"#mem-{new_id}")).to_be_visible()
    restored = json.loads(arena(grown.env, "memory", "show", str(new_id), "--json"))
    assert restored["status"] == "active"


def test_the_context_inspector_shows_layers_budgets_and_recall(grown: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{grown.url}/context?agent=architect&group=team&message=which+tokens+for+the+API")
    expect(page.locator("#result")).to_be_visible()
    recall_row = page.locator("#layers tr", has_text="recall")
    expect(recall_row).to_contain_text("1,400")  # its budget
    expect(page.locator("#recall tbody")).to_contain_text("kept")
    page.click("text=Per-turn tail")
    expect(page.locator("#tail")).to_contain_text("JWT")


def test_summarize_now_from_the_room(grown: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{grown.url}/groups/team")
    expect(page.locator("#live")).to_have_text("live")
    page.fill("#text", "hello everyone, nice weather today")  # nothing to summarise at once
    page.press("#text", "Enter")
    expect(page.locator("li.msg.agent", has_text="nice weather")).to_have_count(1)
    page.click("#summary summary")
    page.click("#summarize")
    note = page.locator("#summary-note")
    expect(note).not_to_have_text("summarizing…")
    expect(note).to_contain_text("written")
    printed = arena(grown.env, "summary", "team").strip()
    expect(page.locator("#summary-text")).to_contain_text(printed.splitlines()[0])


def test_a_past_replys_report_from_the_room(grown: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{grown.url}/groups/team")
    reply = page.locator("li.msg.agent").first
    reply.locator("button", has_text="context cost").click()
    reply.locator("a", has_text="the whole report").click()
    expect(page.locator("#result-title")).to_contain_text("its context as recorded")
    expect(page.locator("#layers tr", has_text="history")).to_be_visible()
    expect(page.locator("#recall tbody tr").first).to_be_visible()


def test_an_unknown_reply_has_no_report(up: Console) -> None:
    response = httpx.get(f"{up.url}/api/messages/no-such-id/report", timeout=10)
    assert response.status_code == 404
    assert "no reply" in response.json()["error"]


# The room -------------------------------------------------------------------------------------


def test_a_reply_arrives_live_with_why_its_agent_answered(up: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{up.url}/groups/browser-live")
    expect(page.locator("#live")).to_have_text("live")
    expect(page.locator("#empty")).to_be_visible()
    page.fill("#text", "@arch")
    options = page.locator("#mentions li")
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("@architect")
    page.press("#text", "Enter")  # picks the agent
    expect(page.locator("#text")).to_have_value("@architect ")
    page.type("#text", "please design the token schema")
    page.press("#text", "Enter")
    expect(page.locator("#text")).to_have_value("")
    human = page.locator("li.msg.human")
    expect(human).to_have_count(1)
    expect(human.first).to_contain_text("@architect please design the token schema")
    reply = page.locator("li.msg.agent")
    expect(reply).to_have_count(1)
    expect(reply.first.locator(".who")).to_have_text("Architect")
    expect(reply.first.locator(".body")).to_contain_text("[offline]")
    expect(reply.first.locator(".why")).to_contain_text("mention")
    expect(human.first).not_to_have_class("waiting")
    reply.first.locator("button", has_text="context cost").click()
    expect(reply.first.locator(".bar .seg").first).to_be_visible()


def test_a_reply_lists_its_memory_search(up: Console, page) -> None:
    """The architect's reply shows 'memory_search("…") → 1 hit' and quotes the decision."""
    expect = playwright.expect
    page.goto(f"{up.url}/groups/browser-tools")
    expect(page.locator("#live")).to_have_text("live")
    _post(page, "we decided to use Postgres")
    expect(page.locator("li.msg.agent")).to_have_count(1)
    _post(page, "@architect what did we decide about the database?")
    reply = page.locator("li.msg.agent").nth(1)
    expect(reply.locator(".who")).to_have_text("Architect")
    expect(reply.locator(".body")).to_contain_text("we decided to use Postgres")
    expect(reply.locator("ul.tools li")).to_have_text(
        'memory_search("what did we decide about the database") → 1 hit'
    )
    expect(reply.locator(".usage")).to_contain_text("2 model calls")


def test_hostile_text_is_shown_as_text_and_history_survives_a_reload(up: Console, page) -> None:
    expect = playwright.expect
    hostile = "<img src=x onerror=alert(1)> **bold** [link](javascript:alert(2))"
    page.goto(f"{up.url}/groups/browser-hostile")
    expect(page.locator("#live")).to_have_text("live")
    _post(page, hostile)
    expect(page.locator("li.msg.agent")).to_have_count(1)
    human = page.locator("li.msg.human .body").first
    expect(human).to_contain_text("<img src=x onerror=alert(1)>")
    expect(human.locator("strong")).to_have_text("bold")
    assert page.locator("li.msg img").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    shown = page.locator("li.msg").all_inner_texts()

    page.reload()
    expect(page.locator("#live")).to_have_text("live")
    expect(page.locator("li.msg")).to_have_count(len(shown))
    expect(page.locator("li.msg.human .body").first).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator("li.msg img").count() == 0


def test_a_post_the_cli_would_refuse_is_refused_inline(up: Console, page) -> None:
    expect = playwright.expect
    page.goto(f"{up.url}/groups/browser-refused")
    expect(page.locator("#live")).to_have_text("live")
    page.fill("#sender", "../x")
    page.fill("#text", "hello")
    page.press("#text", "Enter")
    expect(page.locator("#post-error")).to_contain_text("sender")
    expect(page.locator("li.msg")).to_have_count(0)


def test_groups_and_status_pages(up: Console, page) -> None:
    """A message posted through the API (202), once answered, lists its group; the status
    page."""
    expect = playwright.expect
    posted = httpx.post(
        f"{up.url}/api/groups/browser-status/messages", json={"text": "hello there"}, timeout=10
    )
    assert posted.status_code == 202
    page.goto(f"{up.url}/groups/browser-status")
    expect(page.locator("li.msg.agent")).to_have_count(1)  # answered: in the history

    page.goto(up.url)
    expect(page.locator("#groups a", has_text="browser-status")).to_be_visible()
    page.goto(f"{up.url}/status")
    expect(page.locator("#status .card").first).to_be_visible()
    expect(page.locator("#status")).to_contain_text("Daemons and streams")
    page.fill("#route-text", "@tester please check the login flow")
    page.press("#route-text", "Enter")
    expect(page.locator("#route-result")).to_contain_text("tester")


def test_web_beside_up_with_a_token_asks_to_log_in(up: Console, page) -> None:
    """`arena web` beside the running `arena up`, with a token: it prints its console's address
    (and nothing before); the login page first; a wrong token is refused; the right one opens
    the console; with the token as a bearer its API lists the same agents as up's and reads
    up's embedded Redis; on SIGTERM it stops with 0, "arena: stopped" last, no server log."""
    expect = playwright.expect
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    web_env = {**up.env, "ARENA_WEB_PORT": str(port), "ARENA_WEB_TOKEN": "s3cret-token-1"}
    web, printed = start_arena(["web"], web_env, "arena: console")
    try:
        assert printed == [f"arena: console {url}"]
        page.goto(f"{url}/status")
        expect(page.locator("input[type=password]")).to_be_visible()
        page.fill("input[type=password]", "wrong")
        page.press("input[type=password]", "Enter")
        expect(page.locator("input[type=password]")).to_be_visible()
        page.fill("input[type=password]", "s3cret-token-1")
        page.press("input[type=password]", "Enter")
        expect(page.locator("h1")).to_have_text("Groups")
        expect(page.locator("#groups tbody tr").first).not_to_have_text("Loading…")
        expect(page.locator("#groups-error")).to_be_hidden()
        page.goto(f"{url}/status")
        expect(page.locator("#status .card").first).to_be_visible()
        assert "s3cret-token-1" not in page.content()

        bearer = {"Authorization": "Bearer s3cret-token-1"}
        agents = httpx.get(f"{url}/api/agents", headers=bearer, timeout=10).json()
        ups = httpx.get(f"{up.url}/api/agents", timeout=10).json()
        assert [a["id"] for a in agents["agents"]] == [a["id"] for a in ups["agents"]]
        assert "architect" in [a["id"] for a in agents["agents"]]
        letters = httpx.get(f"{url}/api/dead-letters", headers=bearer, timeout=10)
        assert letters.json() == {"dead_letters": []}
    finally:
        rest = stop_arena(web)
    assert web.returncode == 0, rest
    assert rest.strip().endswith("arena: stopped")
    assert "Uvicorn" not in rest


# The spending caps ----------------------------------------------------------------------------


def _row(report: dict[str, Any], scope: str, name: str) -> dict[str, Any]:
    return next(r for r in report["rows"] if r["scope"] == scope and r["name"] == name)


def test_the_status_page_shows_the_capped_groups_spending(spent: Console, page) -> None:
    """The group's row reads 'N / 12,000' tokens today, as `arena budget --json` counts it."""
    expect = playwright.expect
    shown = json.loads(arena(spent.env, "budget", "--json"))
    used = _row(shown, "group", BUDGET_GROUP)["today"]["tokens"]
    assert 0 < used < GROUP_CAP * 0.8
    page.goto(f"{spent.url}/status")
    row = page.locator(f'#budget tbody tr[data-scope="group"][data-name="{BUDGET_GROUP}"]')
    expect(row).to_contain_text(f"{used:,} / {GROUP_CAP:,}")
    expect(row.locator("td.mark")).to_have_text(f"{100 * used // GROUP_CAP} %")
    expect(row).not_to_have_class("budget-near")
    expect(page.locator('#budget tbody tr[data-scope="model"] td.mark')).to_have_text("\u2013")
    expect(page.locator("#budget-reset")).to_contain_text("Caps reset")
    expect(page.locator("#budget-hint")).to_be_hidden()


def test_the_inspector_lists_a_replys_memory_search_and_its_steps(spent: Console, page) -> None:
    """From the room's reply to its report: the memory_search call and the 2 model calls."""
    expect = playwright.expect
    page.goto(f"{spent.url}/groups/{BUDGET_GROUP}")
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


def test_a_reply_without_tools_hides_the_section(spent: Console, page) -> None:
    """The first reply called no tool: no "Memory tools" section in its report."""
    expect = playwright.expect
    room = httpx.get(f"{spent.url}/api/groups/{BUDGET_GROUP}/messages", timeout=10).json()
    first = next(m for m in room["messages"] if m["kind"] == "agent")
    page.goto(f"{spent.url}/context?reply={first['id']}")
    expect(page.locator("#result")).to_be_visible()
    expect(page.locator("#tools")).to_be_hidden()


def test_the_budget_api_says_a_cap_is_set(spent: Console) -> None:
    """``caps_set`` is true with a group cap; each group row carries it."""
    capped = httpx.get(f"{spent.url}/api/budget", timeout=10).json()
    assert capped["caps_set"] is True
    assert _row(capped, "group", BUDGET_GROUP)["today"]["tokens_cap"] == GROUP_CAP


def _call(agent: str, group: str, tokens: int, micro_usd: int) -> Spent:
    return Spent(agent=agent, group=group, model="claude-test", tokens=tokens, micro_usd=micro_usd)


def _spend(redis_url: str, zone: ZoneInfo, *calls: Spent) -> None:
    """Count ``calls`` as the daemon does after each model call (in a thread of its own:
    Playwright's loop runs in this one)."""

    async def count() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            ledger = CapLedger(client, zone)
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
