"""What `arena` shows of stored text: controls escaped, brackets kept, JSON valid."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, date, datetime
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from rich.console import Console

from orchestrator.background.listing import JobRow
from orchestrator.cli.jobs import jobs_table
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.wire import Outbound, deadletter_stream, inbox_stream, outbox_stream
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.memory.versions.store import VersionStore
from tests.arena_helpers import REPO
from tests.history_seed import write_history
from tests.waiting import block_until

T0 = datetime(2026, 4, 1, 10, 0, tzinfo=UTC)
# NUL, ESC starting a colour sequence, a C1 control, a right-to-left override and an isolate.
HOSTILE = "alpha\x00beta\x1b[31mred\x85next\u202eevil\u2066iso\tafter"
# As shown: rich expands the tab, and difflib splits lines at the C1 "next line" control.
SHOWN = "alpha\\x00beta\\x1b[31mred\\x85next\\u202eevil\\u2066iso"
SHOWN_LINES = ("alpha\\x00beta\\x1b[31mred\\x85", "next\\u202eevil\\u2066iso")
_UNSAFE = {*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u202e", "\u2066"} - {"\t", "\n"}


def assert_safe(output: str) -> None:
    """Nothing a terminal would act on is left in ``output``."""
    assert not set(output) & _UNSAFE, sorted(set(output) & _UNSAFE)


# `arena` in this process reads the test team's settings from the environment, at 80 columns.
pytestmark = pytest.mark.usefixtures("settings_env", "eighty_columns")


@pytest.fixture
def eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal 80 columns wide."""
    monkeypatch.setenv("COLUMNS", "80")


def arena(*args: str):
    return CliRunner().invoke(main, list(args))


def _memory(engine, group: str, content: str, type_: str = "decision") -> int:
    outcome = SessionMemory(engine).write(
        NewMemory(
            scope="session",
            scope_id=group,
            type=type_,
            content=content,
            now=T0,
            agent="ping",
            group_id=group,
        )
    )
    return outcome.record.id


def _message(engine, group: str, n: int, text: str, sender: str = "alex") -> None:
    write_history(
        engine,
        ChatMessage(
            id=f"{n}-0",
            group=group,
            sender=sender,
            kind=MessageKind.HUMAN,
            text=text,
            created_at=T0,
        ),
    )


def test_memory_views_escape_controls(settings, engine, monkeypatch):
    """`memory show`, `list` and `search` show NUL, ESC, C1 and bidi controls escaped."""
    monkeypatch.setenv("COLUMNS", "200")  # table cells on one line
    entry = _memory(engine, "team", f"JWT tokens {HOSTILE}")
    for args in (["show", str(entry)], ["list"], ["search", "JWT"]):
        result = arena("memory", *args)
        assert result.exit_code == 0, result.output
        assert_safe(result.output)
        assert "\\x00" in result.output
        assert "\\u202e" in result.output
    shown = arena("memory", "show", str(entry)).output
    assert f"JWT tokens {SHOWN}" in shown


def test_memory_show_leaves_out_unset_fields(settings, engine):
    """`memory show` of a fresh entry prints no `None`: unset fields are left out, and every
    label stands apart from its value."""
    entry = _memory(engine, "team", "We use JWT for sessions")
    shown = arena("memory", "show", str(entry))
    assert shown.exit_code == 0, shown.output
    assert "None" not in shown.output
    assert "superseded_by" not in shown.output
    lines = dict(line.split(":", 1) for line in shown.output.splitlines() if ":" in line)
    assert lines["id"].strip() == str(entry)
    assert all(value.startswith(" ") for value in lines.values())


def test_json_views_are_valid_and_escaped(settings, engine):
    """--json output keeps the text exactly but writes every control as a JSON escape."""
    entry = _memory(engine, "team", f"JWT tokens {HOSTILE}")
    _message(engine, "team", 1, HOSTILE)
    for args in (
        ["memory", "show", str(entry), "--json"],
        ["memory", "list", "--json"],
        ["history", "team", "--json"],
    ):
        result = arena(*args)
        assert result.exit_code == 0, result.output
        assert_safe(result.output)
        first = result.output if "show" in args else result.output.splitlines()[0]
        data = json.loads(first)
        assert HOSTILE in (data.get("content") or data.get("text") or "")


def test_history_escapes_controls_and_keeps_brackets(settings, engine):
    """`arena history` prints a message's controls escaped and its [brackets] as written."""
    _message(engine, "team", 1, f"[bold]x[/bold] [group] {HOSTILE}")
    result = arena("history", "team")
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert f"[bold]x[/bold] [group] {SHOWN}" in result.output


def test_logs_summary_and_growth_escape_controls(settings, engine):
    """`arena logs`, `summary` and `growth --show/--diff` escape what the files hold."""
    day = date(2026, 4, 1)
    log = PersonalLog(settings.workspaces_dir, settings.zone).path("ping", day)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"- lesson: {HOSTILE}\n", encoding="utf-8")
    summary = settings.data_dir / "memory" / "summary_team.md"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(f"We agreed: {HOSTILE}\n", encoding="utf-8")
    versions = VersionStore(engine)
    versions.add("memory_md", "ping", "# Ping\n", trigger="manual", created_at=T0, tokens=3)
    versions.add(
        "memory_md", "ping", f"# Ping\n{HOSTILE}\n", trigger="manual", created_at=T0, tokens=9
    )
    for args in (
        ["logs", "ping", "--date", "2026-04-01"],
        ["summary", "team"],
        ["growth", "ping", "--show", "2"],
        ["growth", "ping", "--diff", "2"],
    ):
        result = arena(*args)
        assert result.exit_code == 0, (args, result.output)
        assert_safe(result.output)
        assert all(line in result.output for line in SHOWN_LINES), args


def test_error_messages_are_printed_verbatim(settings):
    """An error naming input with [brackets] prints them, not rich markup."""
    result = arena("history", "[bold]x[/bold]")
    assert result.exit_code == 1
    assert "group: '[bold]x[/bold]' is not a valid group id" in result.output
    result = arena("memory", "export", "[group]")
    assert result.exit_code == 1
    assert "'[group]'" in result.output


def test_export_of_an_unknown_group_is_refused(settings, engine):
    """Exporting a group with no messages and no memories fails with one line, no file."""
    result = arena("memory", "export", "nosuchgroup")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "arena: group: no group 'nosuchgroup': it has no messages and no memories"
    ]
    assert not (settings.data_dir / "memory" / "session_nosuchgroup.json").exists()
    _message(engine, "quiet", 1, "hello")
    known = arena("memory", "export", "quiet")
    assert known.exit_code == 0, known.output
    assert json.loads((settings.data_dir / "memory" / "session_quiet.json").read_text()) == []


def test_memory_list_checks_type_and_status(settings, engine):
    """`memory list --type/--status` accept only the schema's types and statuses."""
    _memory(engine, "team", "We use JWT")
    for option in ("--type", "--status"):
        result = arena("memory", "list", option, "bogus")
        assert result.exit_code == 2
        assert f"Invalid value for '{option}'" in result.output
        assert "decision" in result.output if option == "--type" else "superseded" in result.output
    lessons = arena("memory", "list", "--type", "lesson", "--status", "any")
    assert lessons.exit_code == 0
    assert "no memories found" in lessons.output


def test_search_shows_rank_and_a_nonzero_score(settings, engine):
    """A word found in every entry scores next to nothing in BM25; hits still show a rank
    and recall's relevance (0..1), never 0.000."""
    for content in ("token refresh", "token schema", "token expiry"):
        _memory(engine, "team", content)
    rows = [
        json.loads(line)
        for line in arena("memory", "search", "token", "--json").output.splitlines()
    ]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert all(r["score"] > 0 for r in rows)
    # Recall's relevance: every entry holds the one word asked for, so each is fully relevant.
    assert [r["relevance"] for r in rows] == [1.0, 1.0, 1.0]
    table = arena("memory", "search", "token").output
    assert "0.00" not in table
    assert "1.00" in table
    assert "relevance" in table
    partial = [
        json.loads(line)
        for line in arena("memory", "search", "token schema", "--json").output.splitlines()
    ]
    assert partial[0]["content"] == "token schema"
    assert partial[0]["relevance"] == 1.0
    assert all(0 < r["relevance"] < 1 for r in partial[1:])


def test_retry_with_a_malformed_id_says_so_before_redis(settings):
    """`arena retry abc` names the malformed id, not a Redis outage."""
    result = arena("retry", "abc")
    assert result.exit_code == 1
    assert "not a message id: 'abc' (expected like 1700000000000-0)" in result.output
    assert "Redis" not in result.output


def test_dead_letters_json_and_table(settings, embedded_redis_url, monkeypatch):
    """--json is one JSON list ([] when empty); the table escapes controls, keeps brackets."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    empty = arena("dead-letters", "--json")
    assert empty.exit_code == 0, empty.output
    assert json.loads(empty.output) == []
    assert arena("dead-letters").output.strip() == "no dead letters"
    with redis.Redis.from_url(embedded_redis_url) as raw:
        raw.xadd(
            deadletter_stream(),
            {
                "entry_id": "1-0",
                "reason": "[group] bad",
                "field:group": "team",
                "field:text": f"x{HOSTILE}",
            },
        )
    listed = arena("dead-letters", "--json")
    letters = json.loads(listed.output)
    assert [(d["entry_id"], d["text"]) for d in letters] == [("1-0", f"x{HOSTILE}")]
    assert_safe(listed.output)
    table = arena("dead-letters")
    assert_safe(table.output)
    assert "[group] bad" in table.output
    assert "\\x00" in table.output


def test_dead_letters_show_whole_ids_at_80_columns(settings, embedded_redis_url, monkeypatch):
    """At 80 columns a dead letter's ids are printed whole, to be copied into `arena retry`."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    message_id = "1795699909504123-7"
    with redis.Redis.from_url(embedded_redis_url) as raw:
        letter = raw.xadd(
            deadletter_stream(),
            {
                "entry_id": message_id,
                "reason": "invalid: " + "a long reason that goes on " * 5,
                "field:group": "a-group-with-a-rather-long-name",
                "field:text": "words " * 100,
            },
        ).decode()
    shown = arena("dead-letters")
    assert shown.exit_code == 0, shown.output
    words = shown.output.split()
    assert letter in words
    assert message_id in words
    assert "…" not in " ".join(words[:4])
    assert arena("retry", letter).exit_code == 0


def test_post_from_stdin_leaves_out_the_pipes_line_end(settings, embedded_redis_url, monkeypatch):
    """`echo hi | arena post G -` posts "hi", not "hi\\n"; a line break inside is kept."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    for piped, posted in (("hello there\n", "hello there"), ("two\nlines\r\n", "two\nlines")):
        result = CliRunner().invoke(main, ["post", "stdin-group", "-"], input=piped)
        assert result.exit_code == 0, result.output
        message_id = result.output.strip()
        with redis.Redis.from_url(embedded_redis_url) as raw:
            ((_, fields),) = raw.xrange(inbox_stream(), message_id, message_id)
        assert fields[b"text"].decode() == posted


def test_jobs_table_fits_80_columns(settings, embedded_redis_url, monkeypatch):
    """At 80 columns every `arena jobs` line fits and each job's fields stay whole."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    queued = arena("heartbeat", "ping", "--date", "2025-03-14")
    assert queued.exit_code == 0, queued.output
    result = arena("jobs")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d"
    for job, fields in (
        ("distill_ping_2025-03-14", r"queued\s+manual"),
        ("heartbeat", r"not running"),
        ("idle-check", r"not running"),
    ):
        line = next(line for line in lines if line.split()[:1] == [job])
        assert re.search(rf"{fields}\s+{when}$", line.strip()), line


def test_jobs_table_puts_the_outcome_under_the_job(settings):
    """A long outcome wraps under its job's id at 80 columns, every word kept."""
    row = JobRow(
        id="summary_team_42",
        kind="summary",
        status="failed",
        trigger="idle",
        enqueued_at="2026-04-01T10:00:00+00:00",
        ended_at="2026-04-01T10:01:00+00:00",
        error="LLMError: the model failed after 3 attempts: 529 overloaded, try later",
    )
    buffer = io.StringIO()
    Console(width=80, file=buffer, highlight=False).print(jobs_table([row], settings))
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    at = next(n for n, line in enumerate(lines) if "summary_team_42" in line)
    assert re.search(r"summary_team_42\s+failed\s+idle\s+2026-04-01 \d\d:01", lines[at])
    words = " ".join(line.strip() for line in lines[at + 1 :]).split()
    assert words == row.error.split()


def _publish(url: str, group: str, reply_to: str, texts: list[tuple[str, str]]) -> None:
    with redis.Redis.from_url(url) as raw:
        for n, (kind, text) in enumerate(texts):
            item = Outbound(
                type=kind,  # type: ignore[arg-type]
                id=f"{reply_to}:{n}",
                group=group,
                in_reply_to=reply_to,
                sender="ping",
                kind="agent",
                text=text,
            )
            raw.xadd(outbox_stream(group), item.fields())


def _spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate(timeout=5)


def _newest_inbox_id(url: str, timeout_s: float) -> str:
    with redis.Redis.from_url(url) as raw:
        newest: list[Any] = []

        def posted() -> bool:
            newest[:] = raw.xrevrange(inbox_stream(), count=1)
            return bool(newest)

        block_until(posted, timeout_s=timeout_s, what="a message on the inbox")
    return str(newest[0][0].decode())


def test_post_wait_and_tail_escape_replies(settings, embedded_redis_url, unique_name):
    """`post --wait` and `tail` print replies and notices escaped, brackets as written."""
    env = {"REDIS_URL": embedded_redis_url, "ARENA_DATA_DIR": str(settings.data_dir)}
    group = f"g{unique_name}"[:60].lower()
    tail = _spawn(env, "tail", group)
    post = _spawn(env, "post", group, "hello", "--wait", "20")
    try:
        assert tail.stderr is not None
        assert "following group" in tail.stderr.readline()
        message_id = _newest_inbox_id(embedded_redis_url, 20)
        items = [("reply", HOSTILE), ("notice", "[group] is [bold]busy[/bold]"), ("done", "")]
        _publish(embedded_redis_url, group, message_id, items)
        posted, _ = post.communicate(timeout=20)
        assert tail.stdout is not None
        followed = [tail.stdout.readline(), tail.stdout.readline()]
    finally:
        _stop(post)
        _stop(tail)
    for output in (posted, "".join(followed)):
        assert_safe(output)
        assert f"ping: {SHOWN}" in output
        assert "! [group] is [bold]busy[/bold]" in output


def test_views_are_as_wide_as_the_terminal_when_they_print(monkeypatch):
    """The width is read at each print, not frozen when the CLI was first imported."""
    from orchestrator.cli.output import out

    monkeypatch.setenv("COLUMNS", "50")
    assert out.width == 50
    monkeypatch.setenv("COLUMNS", "120")
    assert out.width == 120
