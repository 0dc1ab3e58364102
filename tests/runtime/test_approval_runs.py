"""Approvals in the chat, through a real `arena up` (daemon, a run worker, the real bundled
`claude` CLI against the offline model): a deletion asks the person; a denial with a note is
answered by a narrower request; a run that stopped waiting is woken by the decision; "always"
lets the same call run later and nothing else; an unanswered request expires to denied; a
request whose run died is orphaned and grants nothing; only the owner decides, once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.adapters.claude_code import bundled_cli
from orchestrator.client import ArenaClient
from orchestrator.core.wire import Outbound
from orchestrator.memory.approvals import ApprovalRecord
from orchestrator.memory.db import make_engine
from orchestrator.runtime.approving import Verdict, opened
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings, load_settings
from tests.arena_up import Arena, acting_agent, arenas
from tests.waiting import block_until

pytestmark = [
    pytest.mark.skipif(bundled_cli() is None, reason="claude-agent-sdk is not installed"),
    pytest.mark.timeout(600),
]

NOTE = "keep the log, only remove the .o files"


def _project(path: Path) -> Path:
    """A project whose build folder holds two objects and a log, committed."""
    (path / "build").mkdir(parents=True)
    for name, text in (("a.o", "a"), ("b.o", "b"), ("run.log", "log")):
        (path / "build" / name).write_text(text + "\n", encoding="utf-8")
    _git(path, "init", "-q", "-b", "main")
    _git(path, "add", "-A")
    _git(path, "-c", "user.name=Me", "-c", "user.email=me@example.org", "commit", "-qm", "build")
    return path


def _git(path: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def arena(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Arena]:
    """`arena up` offline with an agent who acts, on a project with a build folder (and the
    approval settings the test's ``arena_env`` mark gives)."""
    mark = request.node.get_closest_marker("arena_env")
    for up in arenas(tmp_path):
        agents = Path(up.env["ARENA_AGENTS_DIR"])
        acting_agent(agents, "coder", "developer", "editor", ["create", "clean"])
        up.env["ARENA_PROJECT_DIR"] = str(_project(tmp_path / "project"))
        up.env["ARENA_RUN_WORKERS"] = "1"
        up.env.update(mark.args[0] if mark else {})
        up.start()
        yield up


def _settings(up: Arena) -> Settings:
    return load_settings(
        data_dir=up.data,
        agents_dir=Path(up.env["ARENA_AGENTS_DIR"]),
        workspaces_dir=Path(up.env["ARENA_WORKSPACES_DIR"]),
    )


def _requests(up: Arena, state: str | None = None) -> list[ApprovalRecord]:
    settings = _settings(up)
    engine = make_engine(settings.effective_database_url)
    try:
        return Wiring(settings, engine).approvals.listed(state=state)
    finally:
        engine.dispose()


def _pending(up: Arena, count: int = 1) -> ApprovalRecord:
    """The newest pending request, once there are ``count`` requests in all."""
    block_until(
        lambda: len(_requests(up)) >= count and bool(_requests(up, "pending")),
        timeout_s=120,
        what=f"request {count}",
    )
    return _requests(up, "pending")[0]


def _decide(
    up: Arena, approval_id: str, *, approve: bool, by: str = "user", note: str | None = None,
    always: bool = False,
) -> Verdict:  # fmt: skip
    """Decide as the CLI and the console do."""

    async def decide() -> Verdict:
        settings = _settings(up)
        engine = make_engine(settings.effective_database_url)
        try:
            async with opened(settings, Wiring(settings, engine)) as approvals:
                return await approvals.decide(
                    approval_id, approve=approve, by=by, note=note, always=always
                )
        finally:
            engine.dispose()

    return asyncio.run(decide())


def _reply(up: Arena, message_id: str, timeout_s: float = 180) -> Outbound:
    client = ArenaClient(up.url)
    deadline = time.monotonic() + timeout_s
    wanted = f"{message_id}:1:coder"
    for item in client.follow("team", after="0-0", block_ms=200):
        if item is not None and item.id == wanted:
            return item
        if time.monotonic() > deadline:
            raise AssertionError(f"no reply {wanted} within {timeout_s}s")
    raise AssertionError("the stream ended")


def _post(up: Arena, text: str) -> str:
    message_id, _ = ArenaClient(up.url).post_and_wait("team", text)
    return message_id


@pytest.mark.arena_env({"ARENA_APPROVAL_WAIT_S": "120"})
def test_a_denial_with_a_note_is_answered_and_a_narrower_request_approved(
    arena: Arena, tmp_path: Path
):
    """Asked to clean the build folder, the run asks before `rm -rf build`; denied with a note,
    the agent asks for only the .o files; approved, that runs, the log is kept, the reply says
    so, and both requests are audited. A non-owner and a second decision change nothing."""
    message_id = _post(arena, "@coder clean the build folder")
    first = _pending(arena)
    assert first.tool == "Bash"
    assert first.input["command"].endswith("rm -rf build")
    assert first.reason == "deletes files"
    assert first.pattern == "Bash(rm -rf build)"  # the run's own checkout is not in it
    refused = _decide(arena, first.id, approve=True, by="mallory")
    assert refused.outcome == "refused"
    assert "only user decides" in refused.message
    _, said = ArenaClient(arena.url).post_and_wait("team", f"/approve {first.id}", "mallory")
    assert [item.text for item in said if item.type == "notice"] == [
        "only user decides (not mallory)"
    ]
    assert _decide(arena, first.id, approve=True, by="coder").outcome == "refused"
    assert _decide(arena, first.id, approve=False, note=NOTE).ok
    again = _decide(arena, first.id, approve=True)
    assert again.outcome == "already"
    assert "was already denied by user" in again.message

    second = _pending(arena, count=2)
    assert second.input["command"].endswith("rm -f build/*.o")
    _, said = ArenaClient(arena.url).post_and_wait("team", f"/approve {second.id} go ahead")
    assert [item.text for item in said if item.type == "notice"] == [f"{second.id} approved"]
    reply = _reply(arena, message_id)
    assert "rm -f build/*.o" in reply.text
    project = tmp_path / "project"
    assert sorted(p.name for p in (project / "build").iterdir()) == ["run.log"]
    audit = {r.id: r for r in _requests(arena)}
    assert audit[first.id].state == "denied"
    assert audit[first.id].note == NOTE
    assert audit[first.id].decided_by == "user"
    assert audit[second.id].state == "approved"
    assert audit[second.id].note == "go ahead"
    assert audit[first.id].state == "denied"  # mallory's /approve changed nothing
    shown = arena.run("run", "show", f"{message_id}:1:coder")
    assert f"asks {first.id}" in shown.output
    assert f"{first.id} denied by user: {NOTE}" in shown.output


@pytest.mark.arena_env({"ARENA_APPROVAL_WAIT_S": "1"})
def test_a_run_that_stopped_waiting_is_woken_and_always_allows_only_the_same_call(
    arena: Arena, tmp_path: Path
):
    """With no answer in a second the run stops and waits; approving "always" wakes it and the
    folder goes. The same cleaning later runs without asking; another folder still asks."""
    message_id = _post(arena, "@coder clean the build folder")
    first = _pending(arena)
    block_until(lambda: "waiting" in arena.run("runs").output, timeout_s=60, what="the run to wait")
    decided = _decide(arena, first.id, approve=True, always=True)
    assert decided.ok
    assert "Bash(rm -rf build) is on coder's allow-list" in decided.message
    reply = _reply(arena, message_id)
    assert "rm -rf build" in reply.text
    project = tmp_path / "project"
    assert not (project / "build").exists()

    (project / "build").mkdir()
    (project / "build" / "c.o").write_text("c\n", encoding="utf-8")
    _git(project, "add", "-A")
    _git(project, "-c", "user.name=Me", "-c", "user.email=me@example.org", "commit", "-qm", "c")
    again = _post(arena, "@coder clean the build folder")
    assert "rm -rf build" in _reply(arena, again).text
    assert not (project / "build").exists()
    assert len(_requests(arena)) == 1  # it did not ask

    _post(arena, "@coder clean the dist folder")
    other = _pending(arena, count=2)
    assert other.input["command"].endswith("rm -rf dist")


@pytest.mark.arena_env({"ARENA_APPROVAL_WAIT_S": "1", "ARENA_APPROVAL_EXPIRY_S": "2"})
def test_an_unanswered_request_expires_to_denied_and_the_agent_says_so(
    arena: Arena, tmp_path: Path
):
    """Nobody answers: the request expires, the run is woken with that, runs nothing and says
    it did not; a decision after that changes nothing."""
    message_id = _post(arena, "@coder clean the build folder")
    first = _pending(arena)
    reply = _reply(arena, message_id)
    assert f"approval {first.id} expired unanswered" in reply.text
    assert (tmp_path / "project" / "build" / "a.o").exists()
    assert _requests(arena)[0].state == "expired"
    assert _decide(arena, first.id, approve=True).outcome == "already"


@pytest.mark.arena_env({"ARENA_APPROVAL_WAIT_S": "300"})
def test_a_request_whose_run_died_is_orphaned_and_grants_nothing(arena: Arena, tmp_path: Path):
    """The run worker is killed while its run waits for an answer: the run is reported lost,
    the request orphaned, and approving it then runs nothing."""
    message_id = _post(arena, "@coder clean the build folder")
    first = _pending(arena)
    workers = list(arena.record()["workers"])  # type: ignore[call-overload]
    os.kill(workers[-1], signal.SIGKILL)  # the run worker comes after the background one
    reply = _reply(arena, message_id)
    assert "lost" in reply.text
    block_until(lambda: _requests(arena)[0].state == "orphaned", timeout_s=60, what="the orphan")
    assert _decide(arena, first.id, approve=True).outcome == "already"
    assert (tmp_path / "project" / "build" / "a.o").exists()


@pytest.mark.arena_env({"ARENA_CAP_AGENT_TOKENS_PER_DAY": "10"})
def test_a_run_past_a_daily_cap_asks_first_and_starts_only_on_a_yes(arena: Arena, tmp_path: Path):
    """A run whose context would pass the agent's daily cap does not start: it asks to go on
    today with its tokens. Denied, the reply says so and nothing changed; approved, the next
    one runs and writes its file."""
    message_id = _post(arena, "@coder create hello.py that prints hello")
    asked = _pending(arena)
    assert asked.kind == "cap"
    assert asked.reason.startswith("continue today with +")
    assert "daily budget (agent coder: 0 of 10 tokens used)" in asked.reason
    assert asked.pattern is None  # a cap is decided each time
    assert _decide(arena, asked.id, approve=False, note="not today").ok
    refused = _reply(arena, message_id)
    assert "not started: going past the daily cap was denied by user: not today" in refused.text
    assert not (tmp_path / "project" / "hello.py").exists()

    again = _post(arena, "@coder create hello.py that prints hello")
    second = _pending(arena, count=2)
    assert _decide(arena, second.id, approve=True).ok
    assert "Created hello.py" in _reply(arena, again).text
    assert (tmp_path / "project" / "hello.py").read_text() == 'print("hello")\n'


@pytest.mark.arena_env({"ARENA_APPROVAL_WAIT_S": "1"})
def test_a_run_cancelled_while_it_waits_ends_and_withdraws_its_request(
    arena: Arena, tmp_path: Path
):
    """`arena run cancel` on a run waiting for a decision ends it within seconds: the reply
    says so, its request is withdrawn (cancelled by the agent), nothing was deleted."""
    message_id = _post(arena, "@coder clean the build folder")
    asked = _pending(arena)
    block_until(lambda: "waiting" in arena.run("runs").output, timeout_s=60, what="the run to wait")
    cancelled = arena.run("run", "cancel", f"{message_id}:1:coder")
    assert cancelled.exit_code == 0, cancelled.output
    reply = _reply(arena, message_id, timeout_s=60)
    assert "cancelled while it waited" in reply.text
    withdrawn = {r.id: r for r in _requests(arena)}[asked.id]
    assert (withdrawn.state, withdrawn.decided_by) == ("cancelled", "coder")
    assert (tmp_path / "project" / "build" / "a.o").exists()
