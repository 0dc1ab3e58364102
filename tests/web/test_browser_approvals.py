"""A run's request for approval in the room, in a real headless Chromium: the request's one
card inside its run's card (what, where, why, the agent's last words, its state and expiry),
its buttons while pending (Approve once, Always with the exact pattern, Deny with a note); Deny
with a note turns the card denied with the note, and the database agrees; a request decided
elsewhere (as `arena approve` does) turns its card approved live. Hostile text from the model
is shown as text. Seeded as the run writes: the request through ``ApprovalStore``, its step
on the run (``RunStore``) and on the group's steps stream (XADD).

A failing test saves its page as a screenshot under ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.engine import Engine

from orchestrator.core.coding import Step, steps_stream
from orchestrator.memory.approvals import ApprovalRecord, ApprovalStore
from orchestrator.memory.conversation.store import NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunStore, StoredStep
from orchestrator.runtime import approving
from orchestrator.runtime.team import load_team
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings
from tests.approvals_seed import ask
from tests.browser import needs_chromium
from tests.web_helpers import chat_message, console_server, console_settings, run_card, store

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium, pytest.mark.timeout(120)]

HOSTILE_WHY = "Clean first <img src=x onerror=alert(1)> then build"


def _asks(url: str, engine: Engine, record: ApprovalRecord, n: int) -> None:
    """The run's numbered approval step for ``record``: kept with the run and appended to
    the group's steps stream, as the run does when it asks."""
    line = f"asks {record.id}: Bash: {record.input['command']} ({record.reason})"
    at = datetime.now(UTC)
    RunStore(engine).add_step(
        record.run_id,
        StoredStep(n=n, at=at, kind="approval", line=line, tool="Bash", approval=record.id),
    )
    step = Step(run=record.run_id, n=n, at=at.isoformat(), kind="approval", line=line,
                tool="Bash", approval=record.id)  # fmt: skip
    with redis.Redis.from_url(url) as raw:
        raw.xadd(steps_stream(record.group), step.fields())  # type: ignore[arg-type]


def _approve_elsewhere(settings: Settings, engine: Engine, approval_id: str) -> str:
    """Approve as `arena approve` does (through ``approving.opened``), in a thread of its own
    (Playwright's loop runs in this one); the verdict's line."""

    async def decide() -> str:
        wiring = Wiring(settings, engine, team=load_team(settings))
        async with approving.opened(settings, wiring) as approvals:
            verdict = await approvals.decide(approval_id, approve=True, by=settings.owner)
        return verdict.message

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, decide()).result(timeout=60)


def test_an_approval_card_is_decided_in_the_room_and_from_elsewhere(
    tmp_path: Path, embedded_redis_url: str, page: Any
) -> None:
    """The request's one card with its buttons; Deny with a note: denied, the note shown and
    stored; a second request approved elsewhere: its card says approved, live."""
    expect = playwright.expect
    url, group = embedded_redis_url, "approvals-live"
    settings = console_settings(tmp_path, url)
    engine = make_engine(settings.effective_database_url)
    human = chat_message(group, f"{group}-1", "alex", "@ping clean the build and push")
    card = run_card(human, "ping", "code rule implement")
    run_id = card.message.id.removesuffix(":run")
    store(engine, [NewReply(message=human), card])
    first = ask(engine, group, "rm -rf build", run_id=run_id, pattern="Bash(rm -rf build)",
                why=HOSTILE_WHY)  # fmt: skip
    approvals = ApprovalStore(engine)
    try:
        with console_server(settings) as base:
            page.goto(f"{base}/groups/{group}")
            expect(page.locator("#live")).to_have_text("live")
            run = page.locator(f'.run-card[data-run="{run_id}"]')
            expect(run.locator(".who")).to_have_text("Ping")

            _asks(url, engine, first, 1)
            asked = run.locator(f'.approval-card[data-approval="{first.id}"]')
            expect(asked.locator(".approval-state")).to_have_text("pending")
            expect(asked.locator(".approval-what")).to_have_text("rm -rf build")
            expect(asked.locator(".approval-cwd")).to_have_text("in /work/project")
            expect(asked.locator(".approval-reason")).to_have_text("asked because it deletes files")
            expect(asked.locator(".approval-why")).to_have_text(HOSTILE_WHY)
            expect(asked.locator(".approval-expiry")).to_contain_text("expires ")
            expect(asked.locator("button")).to_have_text(
                ["Approve once", "Always: Bash(rm -rf build)", "Deny"]
            )
            expect(run.locator(".run-status")).to_have_text("waiting for approval")
            expect(run.locator(".run-steps li")).to_have_count(0)  # a card, not a line
            assert page.locator(".run-card img").count() == 0

            asked.locator(".approval-note").fill("Use make clean instead")
            asked.locator("button.deny").click()
            expect(asked.locator(".approval-state")).to_have_text("denied")
            expect(asked.locator(".approval-decided")).to_contain_text("denied by user at ")
            expect(asked.locator(".approval-note-shown")).to_have_text(
                "note: Use make clean instead"
            )
            expect(asked.locator("button")).to_have_count(0)
            stored = approvals.get(first.id)
            assert stored is not None
            assert (stored.state, stored.decided_by, stored.note) == (
                "denied", "user", "Use make clean instead",
            )  # fmt: skip

            second = ask(engine, group, "git push origin main", run_id=run_id, reason="pushes")
            _asks(url, engine, second, 2)
            pushed = run.locator(f'.approval-card[data-approval="{second.id}"]')
            expect(pushed.locator(".approval-state")).to_have_text("pending")
            expect(pushed.locator("button")).to_have_text(["Approve once", "Deny"])  # no pattern
            assert _approve_elsewhere(settings, engine, second.id) == f"{second.id} approved"
            expect(pushed.locator(".approval-state")).to_have_text("approved")
            expect(pushed.locator(".approval-decided")).to_contain_text("approved by user at ")
            expect(pushed.locator("button")).to_have_count(0)
            # One card per request, whatever steps named it (asked, decided).
            expect(run.locator(".approval-card")).to_have_count(2)
            expect(run.locator(".run-status")).not_to_have_text("waiting for approval")
            page.goto("about:blank")  # the room's event stream ends before the console does
    finally:
        engine.dispose()


def test_always_puts_the_pattern_on_the_agents_page_where_it_is_removed(
    tmp_path: Path, embedded_redis_url: str, page: Any
) -> None:
    """Always: <pattern> approves and lists the pattern on the agent's page, with who added
    it and from which request; Remove takes it off (the database agrees)."""
    expect = playwright.expect
    url, group = embedded_redis_url, "approvals-always"
    settings = console_settings(tmp_path, url)
    engine = make_engine(settings.effective_database_url)
    human = chat_message(group, f"{group}-1", "alex", "@ping add left-pad")
    card = run_card(human, "ping", "code rule implement")
    run_id = card.message.id.removesuffix(":run")
    store(engine, [NewReply(message=human), card])
    asked = ask(engine, group, "npm install left-pad", run_id=run_id,
                pattern="Bash(npm install *)", reason="runs npm")  # fmt: skip
    approvals = ApprovalStore(engine)
    approvals.allow("ping", "Bash(make lint)", by="user", now=datetime.now(UTC))
    try:
        with console_server(settings) as base:
            page.goto(f"{base}/groups/{group}")
            expect(page.locator("#live")).to_have_text("live")
            _asks(url, engine, asked, 1)
            request = page.locator(f'.approval-card[data-approval="{asked.id}"]')
            request.locator("button.approve-always").click()
            expect(request.locator(".approval-state")).to_have_text("approved")
            assert [r.pattern for r in approvals.allowed("ping")] == [
                "Bash(make lint)", "Bash(npm install *)",
            ]  # fmt: skip

            page.goto(f"{base}/agents/ping")
            rows = page.locator("#allow-list tbody tr")
            expect(rows.locator(".allow-pattern")).to_have_text(
                ["Bash(make lint)", "Bash(npm install *)"]
            )
            added = page.locator('#allow-list tr[data-pattern="Bash(npm install *)"]')
            expect(added.locator("td").nth(1)).to_have_text("user")
            expect(added.locator("td").nth(3)).to_have_text(asked.id)
            added.locator("button.allow-remove").click()
            expect(rows.locator(".allow-pattern")).to_have_text(["Bash(make lint)"])
            assert [r.pattern for r in approvals.allowed("ping")] == ["Bash(make lint)"]
            rows.first.locator("button.allow-remove").click()
            expect(rows).to_have_count(0)
            expect(page.locator("#allow-empty")).to_be_visible()
            assert approvals.allowed("ping") == []
            page.goto("about:blank")
    finally:
        engine.dispose()
