"""Agents that act: a turn that is a Claude Code run, through a real `arena up` (daemon, a run
worker, the real bundled `claude` CLI against the offline model on a local Messages API), from
the person's message to the commit in the shared project and the agent's reply in the room,
its steps shown live by `arena tail` and on MQTT as it goes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
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
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunStore
from orchestrator.settings import load_settings
from tests.arena_helpers import read_until, start_background, stop_process
from tests.arena_up import Arena, acting_agent, alive, arenas
from tests.threads import loop_in_thread
from tests.waiting import block_until

pytestmark = [
    pytest.mark.skipif(
        bundled_cli() is None, reason="claude-agent-sdk is not installed: no claude CLI to run"
    ),
    # Real `arena up` and real Claude Code runs: each wait below allows 120 s on a busy
    # machine, more than the suite's 60 s per test.
    pytest.mark.timeout(300),
]


@pytest.fixture
def arena(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Arena]:
    """`arena up` offline, with a team that has an agent who acts on the project (and the
    environment the test's ``arena_env`` mark gives)."""
    mark = request.node.get_closest_marker("arena_env")
    _sleeping_cli(tmp_path)
    _recording_cli(tmp_path)
    for up in arenas(tmp_path):
        extra = mark.args[0] if mark else {}
        up.env.update({k: v.replace("{tmp}", str(tmp_path)) for k, v in extra.items()})
        agents = Path(up.env["ARENA_AGENTS_DIR"])
        acting_agent(agents, "coder", "developer", "editor", ["create", "implement", "fix"])
        acting_agent(agents, "checker", "tester", "tester", ["check", "verify"])
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
    assert "code rule acts (priority 0): keywords create" in card[0].text  # why a run
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
        # The run's context, recorded as a turn's is (the console's cost report reads it).
        stored = HistoryStore(engine).get(run.id)
        assert stored is not None
        assert stored.meta["context"]["tokens"]["total"] > 0
        assert stored.meta["run"]["files"] == ["hello.py"]
    finally:
        engine.dispose()
    reverted = arena.run("run", "revert", run.id)
    assert reverted.exit_code == 0, reverted.output
    assert not (project / "hello.py").exists()
    assert _git(project, "log", "-1", "--format=%an|%s").startswith("arena|Revert")
    again = arena.run("run", "revert", "no-such-run")
    assert again.exit_code == 1
    assert "no run no-such-run" in again.output
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


def _recording_cli(tmp_path: Path) -> Path:
    """The bundled `claude`, after noting the arguments it was given."""
    path = tmp_path / "claude-noted"
    path.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\nexec {bundled_cli()} "$@"\n')
    path.chmod(0o755)
    return path


def _sleeping_cli(tmp_path: Path) -> Path:
    """A `claude` that never answers: a run on it stays running until it is stopped."""
    path = tmp_path / "claude-asleep"
    path.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/cli.pid\nexec sleep 600\n")
    path.chmod(0o755)
    return path


def test_a_run_whose_worker_is_killed_is_reported_lost_and_leaves_nothing_running(
    tmp_path: Path, request: pytest.FixtureRequest
):
    """Killing the run worker mid-run (its whole process group) ends the CLI too, and within
    seconds the room is told the run was lost: never silently gone, never run again."""
    for up in arenas(tmp_path):
        agents = Path(up.env["ARENA_AGENTS_DIR"])
        acting_agent(agents, "coder", "developer", "editor", ["create", "implement", "fix"])
        up.env["ARENA_PROJECT_DIR"] = str(tmp_path / "project")
        up.env["ARENA_CLAUDE_CLI"] = str(_sleeping_cli(tmp_path))
        up.start()
        client = _client(up)
        message_id, _ = client.post_and_wait("team", "@coder create hello.py that prints hello")
        pid_file = tmp_path / "cli.pid"
        block_until(pid_file.exists, timeout_s=60, what="the CLI to start")
        cli = int(pid_file.read_text())
        workers = list(up.record()["workers"])  # type: ignore[call-overload]
        run_worker = workers[-1]  # the run workers come after the background ones
        os.kill(run_worker, signal.SIGKILL)
        reply = _item(client, "team", f"{message_id}:1:coder", timeout_s=60)
        assert "The run ended lost: its worker stopped before the run ended" in reply.text
        block_until(lambda: not alive(cli), timeout_s=10, what="the CLI to be gone")  # noqa: B023


@pytest.mark.arena_env({"ARENA_CLAUDE_CLI": "{tmp}/claude-asleep"})
def test_arena_run_cancel_stops_a_running_run_and_everything_it_started(
    arena: Arena, tmp_path: Path
):
    """`arena run cancel` ends a run that is running: the CLI is stopped within seconds and
    the room is told the run was cancelled."""
    client = _client(arena)
    message_id, _ = client.post_and_wait("team", "@coder create hello.py that prints hello")
    pid_file = tmp_path / "cli.pid"
    block_until(pid_file.exists, timeout_s=60, what="the CLI to start")
    cli = int(pid_file.read_text())
    run_id = f"{message_id}:1:coder"
    cancelled = arena.run("run", "cancel", run_id)
    assert cancelled.exit_code == 0, cancelled.output
    assert "is running: it stops within seconds" in cancelled.output
    reply = _item(client, "team", run_id, timeout_s=60)
    assert "The run ended cancelled" in reply.text
    block_until(lambda: not alive(cli), timeout_s=10, what="the CLI to be gone")


@pytest.mark.arena_env(
    {"ARENA_CAP_AGENT_USD_PER_DAY": "5", "ARENA_CLAUDE_CLI": "{tmp}/claude-noted"}
)
def test_a_run_gets_what_the_daily_dollar_cap_leaves_as_its_budget(arena: Arena, tmp_path: Path):
    """With a dollar cap, the CLI is given what the cap leaves today as its own budget."""
    client = _client(arena)
    message_id, _ = client.post_and_wait("team", "@coder create hello.py that prints hello")
    _item(client, "team", f"{message_id}:1:coder", timeout_s=120)
    argv = (tmp_path / "argv").read_text().split()
    budget = float(argv[argv.index("--max-budget-usd") + 1])
    assert 4.0 < budget < 5.0  # less what was reserved for the run itself


@pytest.mark.arena_env({"ARENA_RUN_WORKERS": "2"})
def test_two_runs_on_the_project_at_once_each_commit_only_their_own(arena: Arena, tmp_path: Path):
    """Two runs in two groups at the same time, on two run workers: both are merged, each
    commit holds only its own file, and the project has both."""
    client = _client(arena)
    first = client.post("one", "@coder create a.py that prints a")
    second = client.post("two", "@coder create b.py that prints b")
    _item(client, "one", f"{first}:1:coder", timeout_s=120)
    _item(client, "two", f"{second}:1:coder", timeout_s=120)
    project = tmp_path / "project"
    assert (project / "a.py").read_text() == 'print("a")\n'
    assert (project / "b.py").read_text() == 'print("b")\n'
    for message_id, name in ((first, "a.py"), (second, "b.py")):
        sha = _git(project, "log", "--format=%H", f"--grep=Arena-Message: {message_id}")
        changed = _git(project, "show", "--format=", "--name-only", sha.splitlines()[0])
        assert changed.split() == [name]
