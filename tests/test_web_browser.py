"""The console in a real headless Chromium, against `arena up` as people start it: open a room,
post with @-completion, see the reply arrive live with why its agent answered; hostile text
shown as text; the same history after a reload; the status page; the login page with a token.

Screenshots are saved under ``test-artifacts/screenshots/`` (not committed).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.arena_helpers import stop_process
from tests.browser import console_env, needs_chromium, start_arena
from tests.ports import free_port

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return console_env(tmp_path_factory, "console")


@pytest.fixture(scope="module")
def console(env: dict[str, str]) -> Iterator[str]:
    """`arena up` with its console; the console's address."""
    up = start_arena(["up"], env, "arena: ready")
    try:
        yield f"http://127.0.0.1:{env['ARENA_WEB_PORT']}"
    finally:
        stop_process(up)


def _post(page: object, text: str) -> None:
    page.fill("#text", text)  # type: ignore[attr-defined]
    page.press("#text", "Enter")  # type: ignore[attr-defined]


def test_a_reply_arrives_live_with_why_its_agent_answered(console: str, page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/groups/browser-live")
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


def test_hostile_text_is_shown_as_text_and_history_survives_a_reload(console: str, page) -> None:
    expect = playwright.expect
    hostile = "<img src=x onerror=alert(1)> **bold** [link](javascript:alert(2))"
    page.goto(f"{console}/groups/browser-hostile")
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


def test_a_post_the_cli_would_refuse_is_refused_inline(console: str, page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/groups/browser-refused")
    expect(page.locator("#live")).to_have_text("live")
    page.fill("#sender", "../x")
    _post(page, "hello")
    expect(page.locator("#post-error")).to_contain_text("sender")
    expect(page.locator("li.msg")).to_have_count(0)


def test_groups_and_status_pages(console: str, page) -> None:
    expect = playwright.expect
    page.goto(f"{console}/groups/browser-status")
    expect(page.locator("#live")).to_have_text("live")
    _post(page, "hello there")
    expect(page.locator("li.msg.agent")).to_have_count(1)

    page.goto(console)
    expect(page.locator("#groups a", has_text="browser-status")).to_be_visible()
    page.goto(f"{console}/status")
    expect(page.locator("#status .card").first).to_be_visible()
    expect(page.locator("#status")).to_contain_text("Daemons and streams")
    page.fill("#route-text", "@tester please check the login flow")
    page.press("#route-text", "Enter")
    expect(page.locator("#route-result")).to_contain_text("tester")


def test_with_a_token_the_console_asks_to_log_in(console: str, env: dict[str, str], page) -> None:
    """`arena web` beside the running `arena up`, with a token: the login page first; a wrong
    token is refused; the right one opens the console."""
    expect = playwright.expect
    web_env = {**env, "ARENA_WEB_PORT": str(free_port()), "ARENA_WEB_TOKEN": "s3cret-token-1"}
    web = start_arena(["web"], web_env, "console")
    try:
        url = f"http://127.0.0.1:{web_env['ARENA_WEB_PORT']}"
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
    finally:
        stop_process(web)
