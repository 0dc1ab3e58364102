"""``arena runs``, ``arena run show`` and ``arena run cancel`` as people use them, on runs
written straight through ``RunStore`` into a real SQLite file."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy.engine import Engine

from orchestrator.cli.main import main
from orchestrator.memory.runs import RunStore
from orchestrator.runtime.run_job import execute
from orchestrator.settings import Settings
from tests.runs_seed import SeededRuns, seed_runs

# `arena` in this process reads the test team's settings from the environment.
pytestmark = pytest.mark.usefixtures("settings_env")


@pytest.fixture
def settings_overrides(embedded_redis_url: str) -> dict[str, Any]:
    """A real Redis: a run's job says on the inbound stream that its run ended."""
    return {"redis_url": embedded_redis_url}


@pytest.fixture
def seeded(engine: Engine) -> SeededRuns:
    """Four runs of group "team": done, failed, running, queued."""
    return seed_runs(engine, "team")


def _arena(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _rows(output: str, ids: list[str]) -> list[str]:
    """The ids of ``ids`` in the order the table prints them."""
    return sorted((i for i in ids if i in output), key=output.index)


def test_runs_lists_newest_first_with_age_time_files_and_cost(seeded: SeededRuns):
    """Each run with its agent, group and status, how long ago, how long it ran, the files it
    changed and its cost; the newest first."""
    shown = _arena("runs")
    assert shown.exit_code == 0, shown.output
    ids = [seeded.queued, seeded.running, seeded.failed, seeded.done]
    assert _rows(shown.output, ids) == ids
    done_line = next(line for line in shown.output.splitlines() if seeded.done in line)
    assert done_line.split()[1:] == ["done", "3h", "1m", "10s", "2", "$0.0123"]
    failed_line = next(line for line in shown.output.splitlines() if seeded.failed in line)
    assert failed_line.split()[1:] == ["failed", "2h", "5s", "1", "-"]
    queued_line = next(line for line in shown.output.splitlines() if seeded.queued in line)
    assert queued_line.split()[1:] == ["queued", "1m", "-", "-", "-"]
    assert "ping in team" in shown.output


def test_runs_of_a_group_and_a_limit(engine: Engine, seeded: SeededRuns):
    """GROUP keeps that group's runs; --limit the newest N."""
    other = seed_runs(engine, "other")
    mine = _arena("runs", "team", "--limit", "2")
    assert mine.exit_code == 0, mine.output
    assert _rows(mine.output, [seeded.queued, seeded.running, seeded.failed]) == [
        seeded.queued,
        seeded.running,
    ]
    assert other.queued not in mine.output


def test_runs_json_is_each_run_as_stored(engine: Engine, seeded: SeededRuns):
    """--json prints one JSON list, newest first: every field of each run and its outcome."""
    shown = _arena("runs", "team", "--json")
    assert shown.exit_code == 0, shown.output
    listed = json.loads(shown.output)
    assert [r["id"] for r in listed] == [
        seeded.queued,
        seeded.running,
        seeded.failed,
        seeded.done,
    ]
    assert listed[-1] == RunStore(engine).get(seeded.done).as_dict()  # type: ignore[union-attr]
    assert listed[-1]["outcome"]["files"] == ["hello.py", "test_hello.py"]


def test_no_runs_is_said_and_json_is_an_empty_list(engine: Engine):
    """With no run: a line that says so, or `[]`."""
    assert _arena("runs").output == "no runs yet\n"
    assert _arena("runs", "demo").output == "no runs in group demo yet\n"
    assert json.loads(_arena("runs", "--json").output) == []


@pytest.mark.parametrize("args", [["runs", "Not A Group!"], ["runs", "--limit", "0"]])
def test_bad_input_is_refused_in_one_line(engine: Engine, args: list[str]):
    """A malformed group or limit is one error line, no traceback, nothing on stdout."""
    refused = _arena(*args)
    assert refused.exit_code in (1, 2)
    assert refused.stdout == ""
    assert "Traceback" not in refused.stderr
    if args[1] != "--limit":
        assert refused.stderr.startswith("arena: group: 'Not A Group!' is not a valid group id")
        assert refused.stderr.count("\n") == 1


def test_run_show_tells_why_each_step_what_changed_and_the_cost(seeded: SeededRuns):
    """Why it ran, how it ended, each step with errors marked, the commit merged with its
    stat, turns, time, cost and tokens, and what the agent said."""
    shown = _arena("run", "show", seeded.done)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    for expected in (
        f"run:      {seeded.done}",
        "status:   done",
        "why:      code rule implement matched (keywords: create)",
        "answers:  message team-1 (hop 1)",
        "took:     1m 10s",
        "turns:    3",
        "cost:     $0.0123",
        "tokens:   1,200 in (+4,000 cache read, +0 cache written), 300 out",
        "changed:  commit 0123456789ab, merged into the project",
        "  test_hello.py | +4 -0",
        "  Created hello.py that prints hello.",
    ):
        assert expected in lines, (expected, shown.output)
    steps = [line for line in lines if line.startswith("    ")]
    assert [s.split(maxsplit=2)[0] for s in steps] == ["1", "2", "3", "4"]
    assert [s[15] for s in steps] == [" ", " ", "!", " "]  # the failed result is marked
    assert steps[1].endswith("Bash: pytest -q")


def test_run_show_of_a_failed_run_names_the_problem_and_the_kept_branch(seeded: SeededRuns):
    """A run that failed: its problem, its commit kept on its branch and why."""
    shown = _arena("run", "show", seeded.failed)
    assert shown.exit_code == 0, shown.output
    assert "problem:  denied WebFetch" in shown.output
    assert "kept on branch arena/run-2 (the run failed)" in shown.output
    assert "cost:" not in shown.output


def test_run_show_json_is_the_run_with_its_steps(engine: Engine, seeded: SeededRuns):
    """--json: the run as `arena runs --json` has it, its steps in order and its requests
    for approval (none)."""
    shown = _arena("run", "show", seeded.running, "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    steps = data.pop("steps")
    assert data.pop("approvals") == []
    assert data == RunStore(engine).get(seeded.running).as_dict()  # type: ignore[union-attr]
    assert [(s["n"], s["line"], s["is_error"]) for s in steps] == [(1, "Read app.py", False)]


@pytest.mark.parametrize("command", ["show", "cancel"])
def test_an_unknown_run_is_one_line_and_exit_1(engine: Engine, command: str):
    """No such run: `arena: no run ID`, exit 1."""
    refused = _arena("run", command, "nope:1:ping")
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert refused.stderr == "arena: no run nope:1:ping\n"


def test_cancel_a_queued_run_and_it_never_starts(
    settings: Settings, engine: Engine, seeded: SeededRuns
):
    """A queued run asked to stop: said so; its job, when a worker takes it, ends it
    cancelled without starting it."""
    said = _arena("run", "cancel", seeded.queued)
    assert said.exit_code == 0, said.output
    assert said.output == f"run {seeded.queued} was queued: it will not start\n"
    runs = RunStore(engine)
    assert runs.get(seeded.queued).cancel_requested  # type: ignore[union-attr]
    assert asyncio.run(execute(settings, seeded.queued))["status"] == "cancelled"
    ended = runs.get(seeded.queued)
    assert ended is not None
    assert (ended.status, ended.started_at) == ("cancelled", None)


def test_cancel_a_running_run_asks_it_to_stop(engine: Engine, seeded: SeededRuns):
    """A running run asked to stop: said so, and marked for its worker to stop it."""
    said = _arena("run", "cancel", seeded.running)
    assert said.exit_code == 0, said.output
    assert said.output == f"run {seeded.running} is running: it stops within seconds\n"
    run = RunStore(engine).get(seeded.running)
    assert run is not None
    assert (run.status, run.cancel_requested) == ("running", True)
    listed = _arena("runs")
    assert "cancel asked" in listed.output


def test_cancel_a_run_that_ended_changes_nothing(engine: Engine, seeded: SeededRuns):
    """A run that already ended: nothing to cancel, exit 1, and it is left as it was."""
    before = RunStore(engine).get(seeded.done)
    refused = _arena("run", "cancel", seeded.done)
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert refused.stderr == f"arena: run {seeded.done} already ended (done): nothing to cancel\n"
    assert RunStore(engine).get(seeded.done) == before


def test_help_lists_the_commands_and_explains_each():
    """`arena --help` lists runs and run in one line each; each command's --help explains."""
    listed = _arena("--help").output
    assert "runs          List the agents' Claude Code runs, newest first." in listed
    assert "run           Show one Claude Code run in full, stop it, or revert its" in listed
    assert "MESSAGE:HOP:AGENT" in _arena("run", "--help").output
    assert "how many files" in " ".join(_arena("runs", "--help").output.split())
    assert "--json" in _arena("run", "show", "--help").output
    assert "a queued run will not start" in _arena("run", "cancel", "--help").output
