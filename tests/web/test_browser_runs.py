"""A run's card in the room, in a real headless Chromium: the agent and why it ran, a live
status, its steps appearing as the worker appends them, Cancel, and how the run ended once
its reply arrives (files, the diff stat in monospace, the commit or the branch it was kept on,
turns, time and cost); a card whose run has ended shows so on load. Hostile step text is shown
as text. Seeded as the daemon and the worker write: cards and replies through the history
store and the outbound stream, steps by XADD.

A failing test saves its page as a screenshot under ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.core.coding import Step, steps_stream
from orchestrator.core.wire import Outbound, outbox_stream
from orchestrator.memory.conversation.run_meta import RunMeta
from orchestrator.memory.conversation.store import NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunStore, StoredStep
from tests.browser import needs_chromium
from tests.waiting import block_until
from tests.web_helpers import (
    chat_message,
    console_server,
    console_settings,
    run_card,
    run_reply,
    store,
)

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium, pytest.mark.timeout(120)]

HOSTILE = "Bash: echo '<img src=x onerror=alert(1)>'"
STAT = " hello.py | +2 -0\n tests/test_hello.py | +5 -0\n 2 files changed, 7 insertions(+)"


def _step(url: str, group: str, run: str, n: int, line: str, *, error: bool = False) -> None:
    kind = "result" if line == "ok" or error else "tool"
    step = Step(run=run, n=n, at="2026-01-05T09:00:00+00:00", kind=kind, line=line,
                tool="Bash", is_error=error)  # fmt: skip
    with redis.Redis.from_url(url) as raw:
        raw.xadd(steps_stream(group), step.fields())  # type: ignore[arg-type]


def _announce(url: str, rows: list[NewReply]) -> None:
    """Put stored messages on their group's outbound stream, as the daemon does once stored."""
    with redis.Redis.from_url(url) as raw:
        for row in rows:
            item = Outbound.for_message(row.message)
            raw.xadd(outbox_stream(item.group), item.fields())  # type: ignore[arg-type]


def test_a_run_card_shows_its_steps_live_then_how_it_ended(
    tmp_path: Path, embedded_redis_url: str, page: Any
) -> None:
    """Card at once; steps as they come (an error marked); Cancel says "cancelling"; the
    reply turns the card into its end; an ended run's card shows it on load."""
    expect = playwright.expect
    url, group = embedded_redis_url, "runs-live"
    settings = console_settings(tmp_path, url)
    engine = make_engine(settings.effective_database_url)
    old = chat_message(group, f"{group}-0", "alex", "@ping fix the build")
    old_card = run_card(old, "ping", "code rule implement")
    kept = RunMeta(
        id=old_card.message.id.removesuffix(":run"), status="failed", why="code rule implement",
        files=("build.sh",), stat=" build.sh | +1 -1", commit="fedcba9876543210",
        merged=False, branch="arena/old-run", turns=3, duration_ms=2500,
    )  # fmt: skip
    store(engine, [NewReply(message=old), old_card, run_reply(old, "ping", kept, "It fails")])
    runs = RunStore(engine)
    runs.create(
        run_id=kept.id, group=group, agent="ping", trigger_id=old.id, root_id=old.id, hop=1,
        why="code rule implement", now=datetime.now(UTC),
    )  # fmt: skip
    runs.add_step(kept.id, StoredStep(n=1, at=datetime.now(UTC), kind="tool", line="Bash: make"))
    runs.finish(
        kept.id, status="failed", text="It fails", problem=None, outcome={}, now=datetime.now(UTC)
    )
    human = chat_message(group, f"{group}-1", "alex", "@ping create hello.py", minutes=5)
    card = run_card(human, "ping", "code rule implement")
    run_id = card.message.id.removesuffix(":run")
    runs.create(
        run_id=run_id, group=group, agent="ping", trigger_id=human.id, root_id=human.id, hop=1,
        why="code rule implement", now=datetime.now(UTC),
    )  # fmt: skip
    assert runs.claim(run_id, datetime.now(UTC))
    try:
        with console_server(settings) as base:
            page.goto(f"{base}/groups/{group}")
            expect(page.locator("#live")).to_have_text("live")
            ended = page.locator(f'.run-card[data-run="{kept.id}"]')
            expect(ended.locator(".run-status")).to_have_text("failed")
            expect(ended).to_contain_text("commit fedcba9 (kept on branch arena/old-run)")
            expect(ended.locator(".run-cancel")).to_have_count(0)
            # Its steps, from the runs API: it ended before the page was opened.
            expect(ended.locator(".run-steps li")).to_have_text(["Bash: make"])

            store(engine, [NewReply(message=human), card])
            _announce(url, [card])
            live = page.locator(f'.run-card[data-run="{run_id}"]')
            expect(live.locator(".who")).to_have_text("Ping")
            expect(live.locator(".why")).to_have_text("why: code rule implement")
            expect(live.locator(".run-status")).to_have_text("queued")

            _step(url, group, run_id, 1, "Write hello.py")
            _step(url, group, run_id, 2, "ok")
            _step(url, group, run_id, 3, HOSTILE)
            _step(url, group, run_id, 4, "error: Exit code 1", error=True)
            steps = live.locator(".run-steps li")
            expect(steps).to_have_text(["Write hello.py", "ok", HOSTILE, "error: Exit code 1"])
            expect(steps.nth(3)).to_have_class("step result error")
            expect(live.locator(".run-status")).to_have_text("running")
            assert page.locator(".run-card img").count() == 0

            live.locator(".run-cancel").click()
            expect(live.locator(".run-status")).to_have_text("cancelling")
            expect(live.locator(".run-cancel")).to_be_disabled()
            block_until(
                lambda: bool((found := runs.get(run_id)) and found.cancel_requested),
                timeout_s=10,
                what="the real cancel route to ask the run to stop",
            )

            done = RunMeta(
                id=run_id, status="done", why="code rule implement",
                files=("hello.py", "tests/test_hello.py"), stat=STAT, commit="0123456789abcdef",
                merged=True, turns=4, duration_ms=12_300, cost_usd=0.0123,
            )  # fmt: skip
            reply = run_reply(human, "ping", done, "I wrote hello.py")
            store(engine, [reply])
            _announce(url, [reply])
            expect(live.locator(".run-status")).to_have_text("done")
            expect(live.locator(".run-cancel")).to_have_count(0)
            expect(live.locator(".run-facts")).to_have_text(
                "2 files changed · commit 0123456 (merged)"
            )
            expect(live.locator(".run-spent")).to_have_text("4 turns · 12.3 s · $0.0123")
            expect(live.locator(".run-files li")).to_have_text(["hello.py", "tests/test_hello.py"])
            stat = live.locator("pre.run-stat")
            expect(stat).to_have_text(STAT)
            font = stat.evaluate("(node) => getComputedStyle(node).fontFamily")
            assert "monospace" in font
            expect(live.locator(".run-steps li")).to_have_count(4)  # the steps stay
            page.goto("about:blank")  # the room's event stream ends before the console does
    finally:
        engine.dispose()
