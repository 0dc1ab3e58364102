"""``arena approvals``, ``approve``, ``deny``, ``allow`` and the approvals of ``arena run show``
as people use them, on requests written straight through ``ApprovalStore`` (as a run asks) into
a real SQLite file, with the embedded Redis and MQTT a decision is announced on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from sqlalchemy.engine import Engine

from orchestrator.cli.main import main
from orchestrator.core.approvals import Ask
from orchestrator.core.coding import steps_stream
from orchestrator.memory.approvals import ApprovalRecord, ApprovalStore
from orchestrator.memory.runs import RunStore

pytestmark = pytest.mark.usefixtures("settings_env")

RUN = "1700000000000-0:1:ping"


@pytest.fixture
def settings_overrides(embedded_redis_url: str, embedded_mqtt_url: str) -> dict[str, Any]:
    """The embedded Redis and MQTT: a decision is shown on the run's card through them."""
    return {"redis_url": embedded_redis_url, "mqtt_url": embedded_mqtt_url}


@dataclass(frozen=True, slots=True)
class Asked:
    """Three requests of run RUN in group "team" (oldest first) and one of group "other"."""

    delete: ApprovalRecord
    install: ApprovalRecord
    write: ApprovalRecord
    elsewhere: ApprovalRecord


def _ask(store: ApprovalStore, run_id: str, group: str, ask: Ask, now: datetime) -> ApprovalRecord:
    made, _ = store.request(
        run_id=run_id, group=group, agent="ping", ask=ask, why="tidying up", decider="user",
        now=now, expires_in=timedelta(minutes=30),
    )  # fmt: skip
    return made


@pytest.fixture
def asked(engine: Engine) -> Asked:
    """The requests of :class:`Asked`, each a minute after the one before, the newest a
    minute ago."""
    runs, store = RunStore(engine), ApprovalStore(engine)
    start = datetime.now(UTC) - timedelta(minutes=5)
    for run_id, group in ((RUN, "team"), ("1700000000001-0:1:ping", "other")):
        runs.create(
            run_id=run_id, group=group, agent="ping", trigger_id=run_id.split(":")[0],
            root_id=run_id.split(":")[0], hop=1, why="code rule implement matched", now=start,
        )  # fmt: skip
    delete = Ask(
        kind="tool", tool="Bash", input={"command": "rm -rf build"}, cwd="/p",
        reason="deletes files", pattern="Bash(rm -rf build)",
    )  # fmt: skip
    install = Ask(
        kind="tool", tool="Bash", input={"command": "npm install left-pad"}, cwd="/p",
        reason="runs npm, which is not on the list", pattern="Bash(npm install *)",
    )  # fmt: skip
    write = Ask(
        kind="tool", tool="Write", input={"file_path": "/etc/motd"}, cwd="/p",
        reason="names /etc/motd, outside the workspace and the project",
    )  # fmt: skip
    minute = timedelta(minutes=1)
    return Asked(
        delete=_ask(store, RUN, "team", delete, start),
        install=_ask(store, RUN, "team", install, start + minute),
        write=_ask(store, RUN, "team", write, start + 2 * minute),
        elsewhere=_ask(store, "1700000000001-0:1:ping", "other", delete, start + 3 * minute),
    )


def _arena(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _order(output: str, ids: list[str]) -> list[str]:
    return sorted((i for i in ids if i in output), key=output.index)


def test_approvals_lists_the_pending_newest_first_with_what_and_why(asked: Asked):
    """By default the pending requests, newest first: id, agent in group, run, what it asks,
    why, state, age and when it expires."""
    shown = _arena("approvals")
    assert shown.exit_code == 0, shown.output
    ids = [asked.elsewhere.id, asked.write.id, asked.install.id, asked.delete.id]
    assert _order(shown.output, ids) == ids
    for expected in ("Bash: rm -rf build", "deletes files", "Write /etc/motd", "ping in team",
                     RUN, "pending", "in 2"):  # fmt: skip
        assert expected in shown.output, shown.output


def test_approvals_of_a_group_a_state_and_as_json(engine: Engine, asked: Asked):
    """--group keeps one group's, --state one state (or all), --json prints one JSON list of
    the requests as stored, with what each asks; none is one line saying so, or `[]`."""
    mine = _arena("approvals", "--group", "other")
    assert asked.elsewhere.id in mine.output
    assert asked.delete.id not in mine.output
    ApprovalStore(engine).close(asked.write.id, "expired", by="arena", now=datetime.now(UTC))
    listed = json.loads(_arena("approvals", "--state", "expired", "--json").output)
    assert [r["id"] for r in listed] == [asked.write.id]
    assert listed[0]["what"] == "Write /etc/motd"
    assert listed[0]["state"] == "expired"
    every = json.loads(_arena("approvals", "--state", "all", "--json").output)
    assert len(every) == 4
    assert _arena("approvals", "--state", "denied").output == "no denied approval requests\n"
    assert json.loads(_arena("approvals", "--state", "denied", "--json").output) == []


def test_approve_decides_once_and_announces_it_on_the_card(
    engine: Engine, asked: Asked, embedded_redis_url: str
):
    """`arena approve ID` approves as the owner (exit 0) and shows it on the run's card (a
    step on the group's steps stream); a second approve says it was already approved (exit 1)."""
    done = _arena("approve", asked.install.id)
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{asked.install.id} approved\n"
    record = ApprovalStore(engine).get(asked.install.id)
    assert record is not None
    assert (record.state, record.decided_by) == ("approved", "user")
    with redis.Redis.from_url(embedded_redis_url, decode_responses=True) as r:
        steps = r.xrange(steps_stream("team"))
    assert any(fields.get("approval") == asked.install.id for _, fields in steps), steps
    again = _arena("approve", asked.install.id)
    assert again.exit_code == 1
    assert again.stdout == ""
    assert again.stderr.startswith(f"arena: {asked.install.id} was already approved by user")


def test_deny_keeps_the_note(engine: Engine, asked: Asked):
    """`arena deny ID --note TEXT` denies with the note, kept on the request."""
    done = _arena("deny", asked.delete.id, "--note", "keep the build folder")
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{asked.delete.id} denied\n"
    record = ApprovalStore(engine).get(asked.delete.id)
    assert record is not None
    assert (record.state, record.note) == ("denied", "keep the build folder")


def test_always_stores_the_pattern_and_allow_shows_and_removes_it(engine: Engine, asked: Asked):
    """--always prints the pattern put on the agent's allow-list; `arena allow` lists it with
    who added it and from which request; `allow remove` takes it off, a second time exit 1."""
    done = _arena("approve", asked.install.id, "--always")
    assert done.exit_code == 0, done.output
    assert "Bash(npm install *) is on ping's allow-list" in done.stdout
    shown = _arena("allow", "ping")
    assert shown.exit_code == 0, shown.output
    for expected in ("ping", "Bash(npm install *)", "user", asked.install.id):
        assert expected in shown.output
    listed = json.loads(_arena("allow", "--json").output)
    assert [(r["agent"], r["pattern"], r["approval"]) for r in listed] == [
        ("ping", "Bash(npm install *)", asked.install.id)
    ]
    removed = _arena("allow", "remove", "ping", "Bash(npm install *)")
    assert removed.exit_code == 0, removed.output
    assert ApprovalStore(engine).allowed("ping") == []
    assert _arena("allow", "ping", "--json").output.strip() == "[]"
    gone = _arena("allow", "remove", "ping", "Bash(npm install *)")
    assert gone.exit_code == 1
    assert (
        gone.stderr
        == "arena: Bash(npm install *) is not on ping's allow-list (`arena allow ping`)\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["approve", "42"],
        ["deny", "ap-XYZ"],
        ["approve", "ap-0000000000"],
        ["allow", "nobody"],
        ["allow", "remove", "nobody", "Bash(ls)"],
    ],
)
def test_bad_ids_and_unknown_agents_are_one_line_exit_2(engine: Engine, asked: Asked, args):
    """A malformed or unknown request id, or an agent not of the team: one line, exit 2,
    nothing on stdout and nothing decided."""
    refused = _arena(*args)
    assert refused.exit_code == 2, refused.output
    assert refused.stdout == ""
    assert refused.stderr.startswith("arena: ")
    assert refused.stderr.count("\n") == 1
    assert "Traceback" not in refused.stderr
    assert [r.state for r in ApprovalStore(engine).listed()] == ["pending"] * 4


def test_run_show_lists_its_approvals_as_the_audit_trail(asked: Asked):
    """`arena run show` lists the run's requests oldest first with their state, who decided
    when, the note and what "always" stored; --json has them under `approvals`."""
    assert _arena("deny", asked.delete.id, "--note", "not the build").exit_code == 0
    assert _arena("approve", asked.install.id, "--always").exit_code == 0
    shown = _arena("run", "show", RUN)
    assert shown.exit_code == 0, shown.output
    section = shown.output.split("approvals:\n", 1)[1]
    assert _order(section, [asked.delete.id, asked.install.id, asked.write.id]) == [
        asked.delete.id,
        asked.install.id,
        asked.write.id,
    ]
    assert asked.elsewhere.id not in shown.output
    for expected in (
        f"{asked.delete.id} denied    Bash: rm -rf build",
        "denied by user",
        "note: not the build",
        "always: Bash(npm install *) on ping's allow-list",
        f"{asked.write.id} pending   Write /etc/motd",
    ):
        assert expected in section, section
    detail = json.loads(_arena("run", "show", RUN, "--json").output)
    assert [a["id"] for a in detail["approvals"]] == [
        asked.delete.id,
        asked.install.id,
        asked.write.id,
    ]
    assert detail["approvals"][0]["note"] == "not the build"


def test_route_says_a_command_goes_to_no_agent():
    """`arena route "/approve ID"` says it is a command for the arena, routed to no agent."""
    shown = _arena("route", "/approve ap-0123456789 --always")
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[:2] == ["agents:   none", "reason:   command"]
    data = json.loads(_arena("route", "/deny ap-0123456789", "--json").output)
    assert (data["agents"], data["reason"]) == ([], "command")
