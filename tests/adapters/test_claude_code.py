"""Tests for orchestrator.adapters.claude_code: how a Claude Code run ends, each way, through
``ClaudeCode.run`` with a fake ``claude`` (tests/adapters/fake_claude.py) that speaks the CLI's
protocol and fails on demand, under the real launcher (its own process group)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from orchestrator.adapters.claude_code import ClaudeCode, RunOutcome, RunRequest, RunStep
from orchestrator.core.models import CodeSpec, Usage
from tests.adapters.fake_claude import STDERR_LINES, write_fake
from tests.arena_helpers import REPO
from tests.waiting import block_until, wait_until

QUICK = CodeSpec(inactivity_s=30, wall_s=60)  # limits no healthy fake run comes near
# What tells an end we asked for from the SDK's own fallback: it closes the CLI's stdin and
# waits 5 s before it sends SIGTERM, so an end that takes longer was not ours.
PROMPT_END_S = 4.0


@dataclass
class FakeRun:
    """A run of the fake CLI: its folders, and what it reported."""

    root: Path
    steps: list[RunStep] = field(default_factory=list)
    cancelled_at: float | None = None  # time.monotonic() when the cancel was set

    def request(self, code: CodeSpec) -> RunRequest:
        for folder in ("workspace", "project"):
            (self.root / folder).mkdir(exist_ok=True)
        return RunRequest(
            prompt="run the tests",
            system="You are the tester.",
            workspace=self.root / "workspace",
            project=self.root / "project",
            config_dir=self.root / "config",
            model="claude-test",
            code=code,
            api_key="test",
        )

    def pids(self) -> dict[str, list[int]]:
        """Every process of the run by kind: the launcher, the CLI and what the CLI started."""
        found: dict[str, list[int]] = {}
        launcher = self.root / "config" / "run.pid"
        if launcher.exists():
            found["launcher"] = [int(launcher.read_text())]
        notes = self.root / "pids"
        for line in notes.read_text().splitlines() if notes.exists() else ():
            kind, pid = line.split()
            found.setdefault(kind, []).append(int(pid))
        return found

    def running(self) -> list[int]:
        return [pid for pids in self.pids().values() for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1]
    except FileNotFoundError:
        return False  # it ended while we looked
    return not state.startswith("Z")


async def run_fake(
    tmp_path: Path,
    scenario: str,
    code: CodeSpec = QUICK,
    cancel: asyncio.Event | None = None,
    cancel_on: str | None = None,
) -> tuple[RunOutcome, FakeRun]:
    """``ClaudeCode.run`` on the fake playing ``scenario``; ``cancel`` is set on the first step
    of kind ``cancel_on``."""
    fake = FakeRun(root=tmp_path)
    runner = ClaudeCode(tmp_path / "launcher", cli=write_fake(tmp_path, scenario))

    async def on_step(step: RunStep) -> None:
        fake.steps.append(step)
        if cancel is not None and step.kind == cancel_on and not cancel.is_set():
            fake.cancelled_at = time.monotonic()
            cancel.set()

    outcome = await runner.run(fake.request(code), on_step, cancel)
    return outcome, fake


def _lines(fake: FakeRun) -> list[tuple[int, str, str]]:
    return [(step.n, step.kind, step.line) for step in fake.steps]


async def test_a_normal_run_reports_its_steps_in_order_and_is_done(tmp_path: Path):
    """Tool, result, text in order; the result's text, turns, cost and summed usage; done."""
    outcome, fake = await run_fake(tmp_path, "normal")
    assert outcome.status == "done", outcome.problem
    assert _lines(fake) == [
        (1, "tool", "Bash: pytest -q"),
        (2, "result", "ok"),
        (3, "text", "All three tests pass."),
    ]
    assert [step.tool for step in fake.steps] == ["Bash", "Bash", None]
    assert outcome.text == "All three tests pass."
    assert (outcome.turns, outcome.cost_usd, outcome.problem) == (2, 0.0125, None)
    assert outcome.usage == Usage(input_tokens=250, output_tokens=30)
    assert outcome.session_id is not None
    assert fake.running() == []


async def test_a_stall_after_a_tool_result_ends_the_run_and_everything_it_started(
    tmp_path: Path,
):
    """No output after a tool result: stalled after inactivity_s, the CLI and its child gone,
    the steps as far as it got and the tokens it used so far."""
    code = CodeSpec(inactivity_s=5, wall_s=60)  # above a busy start-up
    outcome, fake = await run_fake(tmp_path, "stall", code)
    assert outcome.status == "stalled"
    assert _lines(fake) == [(1, "tool", "Bash: npm run dev"), (2, "result", "ok")]
    assert outcome.usage == Usage(input_tokens=100, output_tokens=20)
    assert outcome.text == ""
    pids = fake.pids()
    assert set(pids) == {"launcher", "cli", "child"}
    assert fake.running() == []
    assert outcome.duration_ms < (code.inactivity_s + PROMPT_END_S) * 1000


async def test_output_that_keeps_coming_slowly_ends_at_the_wall_clock_limit(tmp_path: Path):
    """A run that never stops talking is timed out at wall_s, not left to run."""
    code = CodeSpec(inactivity_s=30, wall_s=4.0)  # room for a busy start-up, then steps
    outcome, fake = await run_fake(tmp_path, "slow", code)
    assert outcome.status == "timed_out"
    assert len(fake.steps) >= 2
    assert all(step.kind == "text" for step in fake.steps)
    assert outcome.usage.input_tokens == 150 * len(fake.steps)
    assert fake.running() == []
    assert outcome.duration_ms < (code.wall_s + PROMPT_END_S) * 1000


async def test_cancelling_the_task_that_runs_it_ends_the_cli_too(tmp_path: Path):
    """The caller's task cancelled mid-run (its worker shutting down): the cancel goes on up,
    and the CLI and its child are gone by then, not left to the SDK's close."""
    task = asyncio.create_task(run_fake(tmp_path, "stall"))
    fake = FakeRun(root=tmp_path)
    await wait_until(lambda: "child" in fake.pids(), timeout_s=20, what="the fake's child")
    await wait_until(lambda: fake.running() != [], timeout_s=1, what="the run running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.running() == []


async def test_a_cancel_mid_run_ends_it_at_once_and_leaves_nothing_running(tmp_path: Path):
    """The cancel event set during a run: cancelled at once (not after the SDK's 5 s), the
    group gone."""
    cancel = asyncio.Event()
    outcome, fake = await run_fake(tmp_path, "stall", QUICK, cancel, cancel_on="result")
    ended = time.monotonic()
    assert outcome.status == "cancelled"
    assert _lines(fake) == [(1, "tool", "Bash: npm run dev"), (2, "result", "ok")]
    assert fake.running() == []
    assert fake.cancelled_at is not None
    assert ended - fake.cancelled_at < PROMPT_END_S


async def test_a_crash_before_the_result_names_the_last_lines_of_stderr(tmp_path: Path):
    """Exit 1 with no result: crashed, the problem quotes stderr's last lines, not the SDK's
    "check stderr"; the steps and tokens seen are kept."""
    outcome, fake = await run_fake(tmp_path, "crash")
    assert outcome.status == "crashed"
    assert outcome.problem is not None
    assert outcome.problem.startswith("the CLI exited with code 1: ")
    assert STDERR_LINES[-1] in outcome.problem
    assert STDERR_LINES[-10] in outcome.problem
    assert STDERR_LINES[-11] not in outcome.problem  # only the last lines
    assert "\n" not in outcome.problem
    assert _lines(fake) == [(1, "tool", "Read app.py")]
    assert outcome.usage == Usage(input_tokens=100, output_tokens=20)
    assert fake.running() == []


async def test_a_line_that_is_not_json_is_a_crash_with_a_clear_problem(tmp_path: Path):
    """A corrupt line on stdout: crashed, the problem says what the CLI wrote, one line."""
    outcome, fake = await run_fake(tmp_path, "garbage")
    assert outcome.status == "crashed"
    assert outcome.problem is not None
    assert outcome.problem.startswith("the CLI wrote what is not its protocol: ")
    assert '{"type": "assistant", "message"' in outcome.problem
    assert "\n" not in outcome.problem
    assert _lines(fake) == [(1, "tool", "Read app.py")]
    assert fake.running() == []


async def test_json_that_is_no_message_is_a_crash_with_a_clear_problem(tmp_path: Path):
    """A JSON line the SDK cannot read as a message: crashed, said in one line."""
    outcome, fake = await run_fake(tmp_path, "misshapen")
    assert outcome.status == "crashed"
    assert outcome.problem is not None
    assert outcome.problem.startswith("the CLI wrote what is not its protocol: ")
    assert "\n" not in outcome.problem
    assert fake.running() == []


async def test_a_cli_that_cannot_start_is_a_crash_that_says_why(tmp_path: Path):
    """A working directory that is gone: crashed, the problem says so in one line."""
    fake = FakeRun(root=tmp_path)
    request = replace(fake.request(QUICK), workspace=tmp_path / "gone")
    runner = ClaudeCode(tmp_path / "launcher", cli=write_fake(tmp_path, "normal"))

    async def on_step(step: RunStep) -> None:
        fake.steps.append(step)

    outcome = await runner.run(request, on_step)
    assert outcome.status == "crashed"
    assert outcome.problem == f"Working directory does not exist: {tmp_path / 'gone'}"
    assert fake.pids() == {}


async def test_a_tool_result_of_several_megabytes_on_one_line_is_read(tmp_path: Path):
    """A tool result of several MB on one line, far past asyncio's 64 KiB and the SDK's 1 MiB
    default: read, and the run goes on."""
    outcome, fake = await run_fake(tmp_path, "long_line")
    assert outcome.status == "done", outcome.problem
    assert _lines(fake) == [
        (1, "tool", "Read data.json"),
        (2, "result", "ok"),
        (3, "text", "The file holds one long list."),
    ]  # the result step is that line, read


async def test_a_grandchild_that_ignores_sigterm_is_killed_when_the_run_ends(tmp_path: Path):
    """What the CLI left running and deaf to SIGTERM is gone once the run has ended."""
    outcome, fake = await run_fake(tmp_path, "grandchild")
    assert outcome.status == "done", outcome.problem
    assert "stubborn" in fake.pids()
    assert fake.running() == []


async def test_what_a_bash_command_left_in_a_session_of_its_own_is_killed_too(tmp_path: Path):
    """Claude Code runs each Bash command in a session of its own: what one left running,
    deaf to SIGTERM, is outside the CLI's group, and still gone once the run has ended."""
    outcome, fake = await run_fake(tmp_path, "orphan")
    assert outcome.status == "done", outcome.problem
    assert len(fake.pids()["orphan"]) == 1
    assert fake.running() == []


async def test_a_permission_denial_fails_the_run_even_when_the_cli_reports_success(
    tmp_path: Path,
):
    """A result with permission_denials and is_error false: failed, the tool denied named."""
    outcome, fake = await run_fake(tmp_path, "denied")
    assert outcome.status == "failed"
    assert outcome.denials == ("WebFetch",)
    assert outcome.problem == "denied WebFetch"
    assert outcome.text == "Answered from memory."
    assert [step.is_error for step in fake.steps] == [False, True, False]
    assert fake.steps[1].line == "error: Permission to use WebFetch has been denied."


async def test_an_error_result_the_cli_exits_1_after_is_a_failure_not_a_crash(tmp_path: Path):
    """The model's API failed: the CLI's error result, then exit 1: failed, the error named."""
    outcome, fake = await run_fake(tmp_path, "error_result")
    assert outcome.status == "failed"
    assert outcome.problem == "API Error: 500 the server failed. This is a server-side issue."
    assert outcome.text == outcome.problem
    assert fake.running() == []


STARTER = """
    import asyncio, sys
    from pathlib import Path
    from orchestrator.adapters.claude_code import ClaudeCode
    from tests.adapters.fake_claude import write_fake
    from tests.adapters.test_claude_code import QUICK, FakeRun

    async def main(root):
        runner = ClaudeCode(root / "launcher", cli=write_fake(root, "stall"))
        async def on_step(step):
            pass
        await runner.run(FakeRun(root=root).request(QUICK), on_step)

    asyncio.run(main(Path(sys.argv[1])))
"""


@pytest.mark.timeout(180)  # above the waits' sum
def test_when_the_process_running_it_is_killed_the_cli_and_its_children_end(tmp_path: Path):
    """SIGKILL to the process that called run (a worker killed mid-run): the group ends."""
    fake = FakeRun(root=tmp_path)
    starter = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(STARTER), str(tmp_path)], cwd=REPO
    )
    try:
        block_until(  # a fresh checkout on a busy machine imports slowly: generous
            lambda: {"launcher", "cli", "child"} <= set(fake.pids()),
            timeout_s=90,
            what="the fake CLI started its child",
        )
        assert fake.running()
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=10)
    block_until(lambda: fake.running() == [], timeout_s=10, what="the run's processes ended")
