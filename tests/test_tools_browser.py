"""The room in a real headless Chromium shows the memory tools a reply called, one line under
it: the offline architect, asked what was decided, searched memory and cites the decision.

Screenshots are saved under ``test-artifacts/screenshots/`` (not committed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.arena_helpers import stop_process
from tests.browser import console_env, needs_chromium, start_arena

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`arena up` with its console; the console's address."""
    env = console_env(tmp_path_factory, "tools")
    up = start_arena(["up"], env, "arena: ready")
    try:
        yield f"http://127.0.0.1:{env['ARENA_WEB_PORT']}"
    finally:
        stop_process(up)


def _post(page: Any, text: str) -> None:
    page.fill("#text", text)
    page.press("#text", "Escape")  # closes the @-completion, if open
    page.press("#text", "Enter")
    playwright.expect(page.locator("#text")).to_have_value("")


def test_a_reply_lists_its_memory_search(console: str, page) -> None:
    """The architect's reply shows 'memory_search("…") → 1 hit' and quotes the decision."""
    expect = playwright.expect
    page.goto(f"{console}/groups/browser-tools")
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
