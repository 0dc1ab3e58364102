"""Agents that act: a turn that is a Claude Code run, through a real `arena up` (daemon, a run
worker, the real bundled `claude` CLI against the offline model on a local Messages API), from
the person's message to the commit in the shared project and the agent's reply in the room,
its steps shown live by `arena tail` and on MQTT as it goes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from orchestrator.adapters.claude_code import bundled_cli
from orchestrator.client import ArenaClient
from orchestrator.core.coding import runs_topic
from orchestrator.core.wire import Outbound
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunStore
from orchestrator.settings import load_settings
from tests.arena_helpers import read_until, start_background, stop_process
from tests.arena_up import Arena, arenas
from tests.threads import loop_in_thread
from tests.waiting import block_until

pytestmark = pytest.mark.skipif(
    bundled_cli() is None, reason="claude-agent-sdk is not installed: no claude CLI to run"
)

CHECKER = """
    id: checker
    name: Checker
    role: tester
    model: claude-test
    runtime: claude-code
    code:
      profile: tester
      rules:
        - name: verify
          keywords: [check, verify]
"""
CODER = """
    id: coder
    name: Coder
    role: developer
    model: claude-test
    runtime: claude-code
    code:
      profile: editor
      rules:
        - name: implement
          keywords: [create, implement, fix]
"""


@pytest.fixture
def arena(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Arena]:
    """`arena up` offline, with a team that has an agent who acts on the project (and the
    environment the test's ``arena_env`` mark gives)."""
    mark = request.node.get_closest_marker("arena_env")
    for up in arenas(tmp_path):
        up.env.update(mark.args[0] if mark else {})
        agents = Path(up.env["ARENA_AGENTS_DIR"])
        (agents / "coder.yaml").write_text(textwrap.dedent(CODER), encoding="utf-8")
        (agents / "checker.yaml").write_text(textwrap.dedent(CHECKER), encoding="utf-8")
        up.env["ARENA_PROJECT_DIR"] = str(tmp_path / "project")
        up.env["ARENA_RUN_WORKERS"] = "1"
        up.start()
        yield up


def _client(up: Arena) -> ArenaClient:
    return ArenaClient(up.url)


def _item(client: ArenaClient, group: str, item_id: str, timeout_s: float) -> Outbound:
    """The outbound item ``item_id`` of ``group`` once it is published."""
    deadline = time.monotonic() + timeout_s
    for item in client.follow(group, after="0-0", block_ms=200):
        if item is not None and item.id == item_id:
            return item
        if time.monotonic() > deadline:
            raise AssertionError(f"no {item_id} in {group} within {timeout_s}s")
    raise AssertionError("the stream ended")


def _git(project: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(project), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_run_changes_the_project_and_its_reply_reaches_the_room(arena: Arena, tmp_path: Path):
    """ "@coder create hello.py …" posts a run card at once; the run writes the file, commits it
    as the coder, and the reply with the diff follows in the room; other turns stay replies."""
    client = _client(arena)
    message_id, first = client.post_and_wait("team", "@coder create hello.py that prints hello")
    card = [item for item in first if item.type == "notice"]
    assert card, first
    assert "started a run" in card[0].text
    assert "implement" in card[0].text  # why the turn became a run
    reply = _item(client, "team", f"{message_id}:1:coder", timeout_s=120)
    assert reply.type == "reply"
    assert "hello.py" in reply.text
    assert "1 file changed" in reply.text
    project = tmp_path / "project"
    assert (project / "hello.py").read_text() == 'print("hello")\n'
    assert _git(project, "log", "-1", "--format=%an|%s").startswith("Coder|")
    assert f"Arena-Message: {message_id}" in _git(project, "log", "-1", "--format=%B")
    settings = load_settings(data_dir=arena.data)
    engine = make_engine(settings.effective_database_url)
    try:
        (run,) = RunStore(engine).recent("team")
        assert run.status == "done"
        assert run.outcome["files"] == ["hello.py"]
        lines = [s.line for s in RunStore(engine).steps(run.id)]
        assert "Write hello.py" in lines
    finally:
        engine.dispose()
    talk = client.post_and_wait("team", "@coder what do you think of the plan?")[1]
    assert [item.type for item in talk if item.type != "done"] == ["reply"]


@contextlib.contextmanager
def _subscribed(up: Arena, topic: str) -> Iterator[list[dict[str, Any]]]:
    """What arrives on ``topic`` of the arena's broker (anonymous, as any subscriber)."""
    got: list[dict[str, Any]] = []

    async def listen(stop: asyncio.Event, ready: Callable[[], None]) -> None:
        port = int(up.env["ARENA_MQTT_PORT"])
        async with aiomqtt.Client("127.0.0.1", port) as subscriber:
            await subscriber.subscribe(topic, qos=1)
            ready()
            reading = asyncio.ensure_future(_read(subscriber, got))
            await stop.wait()
            reading.cancel()

    with loop_in_thread(listen, "runs subscriber"):
        yield got


async def _read(subscriber: aiomqtt.Client, got: list[dict[str, Any]]) -> None:
    async for message in subscriber.messages:
        got.append(json.loads(message.payload))


def test_a_runs_steps_show_live_in_tail_and_on_mqtt(arena: Arena):
    """`arena tail` prints the run's card, then its steps indented under it (the first naming
    the coder and the run), then the reply; each step is also on ``arena/groups/team/runs``."""
    tail = start_background([sys.executable, "-m", "orchestrator", "tail", "team"], arena.env)
    try:
        read_until(tail, "following group team", timeout_s=60)
        with _subscribed(arena, runs_topic("team")) as steps:
            message_id = _client(arena).post("team", "@coder create hello.py that prints hello")
            run_id = f"{message_id}:1:coder"
            printed = read_until(tail, "coder: ", timeout_s=120)
            block_until(
                lambda: any(s["line"] == "Write hello.py" for s in steps),
                timeout_s=30,
                what="the run's steps on MQTT",
            )
    finally:
        stop_process(tail)
    card = next(n for n, line in enumerate(printed) if "started a run" in line)
    assert printed[card + 1].startswith(f"  coder run {run_id} · "), printed
    assert "  · Write hello.py" in printed[card + 2 : -1], printed
    assert "  · ok" in printed[card + 2 : -1], printed
    assert printed[-1].startswith("coder: ")
    written = next(s for s in steps if s["line"] == "Write hello.py")
    assert written["run"] == run_id
    assert written["kind"] == "tool"
    assert written["tool"] == "Write"
    assert written["is_error"] is False
    assert [s["n"] for s in steps] == sorted(s["n"] for s in steps)


def test_the_coder_hands_its_change_to_the_checker_whose_run_verifies_it(arena: Arena):
    """A run's reply that asks @checker to check the file starts the checker's run, which runs
    it in the project (a tester edits nothing) and reports its output."""
    client = _client(arena)
    text = "@coder create hello.py that prints hello, then ask @checker to check it"
    message_id, _ = client.post_and_wait("team", text)
    made = _item(client, "team", f"{message_id}:1:coder", timeout_s=120)
    assert "@checker please check hello.py" in made.text
    checked = _item(client, "team", f"{message_id}:2:checker", timeout_s=120)
    assert checked.sender == "checker"
    assert "exit code 0" in checked.text
    assert "hello" in checked.text
    assert "No file changed." in checked.text


@pytest.mark.arena_env({"ARENA_CAP_AGENT_TOKENS_PER_DAY": "10"})
def test_a_run_over_its_daily_cap_never_starts(arena: Arena, tmp_path: Path):
    """With the agent's daily cap too small for the run's context, the run is refused before
    the CLI starts: the reply says which cap, and the project is untouched."""
    client = _client(arena)
    message_id, _ = client.post_and_wait("team", "@coder create hello.py that prints hello")
    reply = _item(client, "team", f"{message_id}:1:coder", timeout_s=120)
    assert "The run ended failed: not started:" in reply.text
    assert "daily budget (agent coder: 0 of 10 tokens used)" in reply.text
    assert not (tmp_path / "project" / "hello.py").exists()
