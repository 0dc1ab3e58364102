"""``arena import GROUP FILE``: an existing conversation brought into a group."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from orchestrator.background.queue import fetch_job, queue
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.wire import inbox_stream, outbox_stream
from orchestrator.memory.conversation.importer import (
    FUTURE_SKEW,
    ImportProblems,
    ImportSettings,
    parse_lines,
)
from orchestrator.memory.conversation.store import HistoryStore, StoredMessage
from orchestrator.memory.db import make_engine
from tests.arena_helpers import set_team_environment
from tests.history_seed import write_history

GOOD = [
    {"sender": "alice", "text": "We ship on Friday.", "created_at": "2024-03-01T09:15:00"},
    {
        "sender": "bob",
        "text": "Then the API freezes on Wednesday.",
        "created_at": "2024-03-01T09:16:30+00:00",
        "id": "chat-2",
    },
    {"sender": "helper", "text": "Noted.", "created_at": "2024-03-02T10:00:00Z", "kind": "agent"},
    {"sender": "alice", "text": "We ship on Friday.", "created_at": "2024-03-01T09:15:00+01:00"},
]


@pytest.fixture
def env(tmp_path, embedded_redis_url, free_port, monkeypatch) -> dict[str, str]:
    """An Agent Arena under ``tmp_path`` in the environment, its clock zone Paris."""
    return set_team_environment(
        tmp_path,
        monkeypatch,
        REDIS_URL=embedded_redis_url,
        MQTT_URL=f"mqtt://127.0.0.1:{free_port}",
        ARENA_TZ="Europe/Paris",
    )


def arena(*args: str, stdin: bytes | None = None):
    """Run an `arena` subcommand in this process."""
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


def jsonl(rows: list[object]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def stored_rows(env: dict[str, str], group: str = "g1") -> list[StoredMessage]:
    engine = make_engine(f"sqlite:///{env['ARENA_DATA_DIR']}/arena.db")
    try:
        return HistoryStore(engine).recent(group, 1000)
    finally:
        engine.dispose()


def stored(env: dict[str, str], group: str = "g1") -> list[ChatMessage]:
    return [s.message for s in stored_rows(env, group)]


def write(tmp_path: Path, content: bytes) -> str:
    path = tmp_path / "chat.jsonl"
    path.write_bytes(content)
    return str(path)


def test_a_good_file_is_stored_in_order_with_its_dates_and_ids(env, tmp_path):
    """Every line becomes a message, in file order, dated as written (naive = ARENA_TZ)."""
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:3])))
    assert result.exit_code == 0, result.output
    assert "imported 3 messages (0 already there) into group g1" in result.output
    messages = stored(env)
    assert [(m.sender, m.kind) for m in messages] == [
        ("alice", MessageKind.HUMAN),
        ("bob", MessageKind.HUMAN),
        ("helper", MessageKind.AGENT),
    ]
    assert [m.created_at for m in messages] == [
        datetime(2024, 3, 1, 8, 15, tzinfo=UTC),  # 09:15 in Paris
        datetime(2024, 3, 1, 9, 16, 30, tzinfo=UTC),
        datetime(2024, 3, 2, 10, 0, tzinfo=UTC),
    ]
    assert all(m.id.startswith("imp-") for m in messages)
    assert messages[2].text == "Noted."


def test_a_line_s_own_id_is_kept_beside_the_stored_one(env, tmp_path):
    """`arena history --json` shows the id the file gave a line, as the row's file_id."""
    assert arena("import", "g1", write(tmp_path, jsonl(GOOD[:2]))).exit_code == 0
    shown = [json.loads(line) for line in arena("history", "g1", "--json").output.splitlines()]
    assert [row["meta"].get("file_id") for row in shown] == [None, "chat-2"]
    assert shown[1]["id"] != "chat-2"


def test_importing_the_same_file_twice_adds_nothing(env, tmp_path):
    """Derived ids are the same each time, so a second import stores nothing new (a message
    repeated word for word at the same time is two messages)."""
    path = write(tmp_path, jsonl([GOOD[0], GOOD[3], GOOD[1], GOOD[2]]))
    assert arena("import", "g1", path).exit_code == 0
    again = arena("import", "g1", path)
    assert again.exit_code == 0, again.output
    assert "imported 0 messages (4 already there)" in again.output
    assert len(stored(env)) == 4


def test_a_longer_file_adds_only_its_new_lines(env, tmp_path):
    """A conversation exported again with more messages adds just those."""
    arena("import", "g1", write(tmp_path, jsonl(GOOD[:2])))
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:3])))
    assert "imported 1 messages (2 already there)" in result.output
    assert [m.sender for m in stored(env)] == ["alice", "bob", "helper"]


def test_a_byte_order_mark_is_not_an_error(env, tmp_path):
    """A file saved with a UTF-8 byte order mark imports like one without."""
    result = arena("import", "g1", write(tmp_path, b"\xef\xbb\xbf" + jsonl(GOOD[:1])))
    assert result.exit_code == 0, result.output
    assert len(stored(env)) == 1


def test_large_files_show_progress(env, tmp_path):
    """Checking and storing thousands of lines says how far it got."""
    rows = [
        {"sender": "alice", "text": f"point {n}", "created_at": "2024-03-01T09:00:00"}
        for n in range(6000)
    ]
    result = arena("import", "g1", write(tmp_path, jsonl(rows)))
    assert result.exit_code == 0, result.output
    assert "checked line 3000/6001" in result.output
    assert "checked line 6001/6001" in result.output
    assert "stored 6000/6000" in result.output
    assert "imported 6000 messages" in result.output


def test_stdin_is_read_with_a_dash(env):
    """'-' reads the file from stdin."""
    result = arena("import", "g1", "-", stdin=jsonl(GOOD[:2]))
    assert result.exit_code == 0, result.output
    assert [m.text for m in stored(env)] == [GOOD[0]["text"], GOOD[1]["text"]]


def _line(**changes: object) -> dict[str, object]:
    return {**GOOD[0], **changes}


BAD = {
    "not json": (b'{"sender": "alice",\n', "line 1: not JSON"),
    "not an object": (b"[1, 2]\n", "line 1: not a JSON object but list"),
    "not utf-8": (b'{"sender": "al\xffice"}\n', "line 1: not valid UTF-8"),
    "missing sender": (jsonl([{"text": "hi", "created_at": "2024-03-01"}]), "line 1: sender:"),
    "bad sender": (jsonl([_line(sender="-x")]), "line 1: sender: '-x' is not a valid sender"),
    "empty text": (jsonl([_line(text="  ")]), "line 1: text: the message is empty"),
    "control text": (jsonl([_line(text="a\x1bb")]), "line 1: text: control character 0x1b"),
    "bad date": (jsonl([_line(created_at="yesterday")]), "line 1: created_at: not an ISO 8601"),
    "number date": (jsonl([_line(created_at=5)]), "line 1: created_at: not a string"),
    "future date": (
        jsonl([_line(created_at="2099-01-01T00:00:00")]),
        "line 1: created_at: 2098-12-31T23:00:00+00:00 is in the future (now is ",
    ),
    "last date at an offset": (
        jsonl([_line(created_at="9999-12-31T23:59:59-01:00")]),
        "line 1: created_at: out of range: '9999-12-31T23:59:59-01:00'",
    ),
    "first date in ARENA_TZ": (
        jsonl([_line(created_at="0001-01-01T00:00:00")]),
        "line 1: created_at: out of range: '0001-01-01T00:00:00'",
    ),
    "unknown field": (jsonl([_line(room="x")]), "line 1: room: unknown field"),
    "bad id": (jsonl([_line(id="../x")]), "line 1: id: '../x' is not a safe id"),
    "bad kind": (jsonl([_line(kind="notice")]), "line 1: kind: 'notice' is not"),
    "agent kind from a person": (jsonl([_line(kind="agent")]), "line 1: kind: 'agent' needs"),
    "duplicate id": (
        jsonl([_line(id="a"), _line(id="a", text="x")]),
        "line 2: id: 'a' is already the id of line 1",
    ),
    "back in time": (
        jsonl([GOOD[2], GOOD[0]]),
        "line 2: created_at: earlier than line 1's",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_file_changes_nothing_and_names_the_line(env, tmp_path, name):
    """Any bad line: exit 1, the line and field named, not one message written."""
    content, expected = BAD[name]
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:2]) + content))
    assert result.exit_code == 1
    shifted = expected.replace("line 2:", "line 4:").replace("line 1", "line 3")
    assert shifted in result.output
    assert "nothing imported" in result.output
    assert stored(env) == []


@pytest.mark.parametrize("content", [b"", b"\n \n"])
def test_an_empty_file_is_refused(env, tmp_path, content):
    """A file with no message (blank lines are skipped) is an error, not a silent success."""
    result = arena("import", "g1", write(tmp_path, content))
    assert result.exit_code == 1
    assert "the file holds no messages" in result.output


def test_many_bad_lines_are_listed_up_to_twenty(env, tmp_path):
    """Every problem counts; the first twenty are shown, then how many more."""
    result = arena("import", "g1", write(tmp_path, jsonl([_line(sender="?")] * 25)))
    assert result.exit_code == 1
    assert "25 problem(s)" in result.output
    assert "line 20: sender:" in result.output
    assert "line 21:" not in result.output
    assert "and 5 more" in result.output


def test_a_date_a_little_ahead_is_a_clock_difference_but_more_is_refused(env, tmp_path):
    """30 s ahead of now is taken as the writer's clock running fast; 2 minutes is refused."""
    now = datetime.now(UTC)
    soon = _line(created_at=(now + timedelta(seconds=30)).isoformat())
    later = _line(text="Later.", created_at=(now + timedelta(minutes=2)).isoformat())
    refused = arena("import", "g1", write(tmp_path, jsonl([later])))
    assert refused.exit_code == 1
    assert "line 1: created_at:" in refused.output
    assert "is in the future" in refused.output
    assert stored(env) == []
    accepted = arena("import", "g1", write(tmp_path, jsonl([soon])))
    assert accepted.exit_code == 0, accepted.output
    assert len(stored(env)) == 1


def test_the_future_starts_after_now_plus_the_allowance():
    """A line dated exactly now plus the allowance is accepted; a microsecond later is not."""
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    config = ImportSettings(group="g1", zone=UTC, max_bytes=10_000, now=now)
    edge = now + FUTURE_SKEW
    [line] = parse_lines(jsonl([_line(created_at=edge.isoformat())]), config)
    assert (line.number, line.message.created_at) == (1, edge)
    beyond = (edge + timedelta(microseconds=1)).isoformat()
    with pytest.raises(ImportProblems, match=r"line 1: created_at: .* is in the future"):
        parse_lines(jsonl([_line(created_at=beyond)]), config)


def test_messages_older_than_the_group_are_refused(env, tmp_path):
    """The history stays in time order: nothing older than the group's newest goes in."""
    arena("import", "g1", write(tmp_path, jsonl([GOOD[2]])))
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:2])))
    assert result.exit_code == 1
    assert "line 1: created_at: 2024-03-01T08:15:00+00:00 is older than" in result.output
    assert len(stored(env)) == 1


def test_one_file_goes_into_two_groups_each_idempotent(env, tmp_path):
    """Ids given in a file are a group's own: the same export goes into two groups, and
    again into either adds nothing."""
    path = write(tmp_path, jsonl([_line(id="L0"), _line(id="L1", text="Then.")]))
    first = arena("import", "g1", path)
    assert first.exit_code == 0, first.output
    second = arena("import", "g2", path)
    assert second.exit_code == 0, second.output
    assert "imported 2 messages (0 already there) into group g2" in second.output
    for group in ("g1", "g2"):
        again = arena("import", group, path)
        assert again.exit_code == 0, again.output
        assert "imported 0 messages (2 already there)" in again.output
    one, two = stored(env, "g1"), stored(env, "g2")
    assert [m.text for m in one] == [m.text for m in two] == [GOOD[0]["text"], "Then."]
    assert not {m.id for m in one} & {m.id for m in two}


def test_an_id_stored_as_it_was_is_found_in_its_group(env, tmp_path):
    """Lines an earlier version stored under their own ids are already there in that group
    (not stored twice) and another group still takes the file."""
    engine = make_engine(f"sqlite:///{env['ARENA_DATA_DIR']}/arena.db")
    try:
        write_history(
            engine,
            ChatMessage(
                id="chat-2",
                group="g1",
                sender="bob",
                kind=MessageKind.HUMAN,
                text=GOOD[1]["text"],
                created_at=datetime(2024, 3, 1, 9, 16, 30, tzinfo=UTC),
            ),
            status="imported",
            meta={"imported": True, "line": 2},
        )
    finally:
        engine.dispose()
    path = write(tmp_path, jsonl([GOOD[1], GOOD[2]]))
    result = arena("import", "g1", path)
    assert result.exit_code == 0, result.output
    assert "imported 1 messages (1 already there) into group g1" in result.output
    messages = stored(env)
    assert [m.sender for m in messages] == ["bob", "helper"]
    assert messages[0].id == "chat-2"  # the earlier row, left as it was
    other = arena("import", "g2", path)
    assert other.exit_code == 0, other.output
    assert "imported 2 messages (0 already there) into group g2" in other.output


def test_an_id_stored_as_it_was_with_other_words_is_refused(env, tmp_path):
    """A line whose id is a message of the group saying something else is named."""
    live_message(env, datetime(2024, 3, 1, 7, 0, tzinfo=UTC))
    result = arena("import", "g1", write(tmp_path, jsonl([_line(id="1709280000000-0")])))
    assert result.exit_code == 1
    assert "line 1: id: '1709280000000-0' is already stored with another" in result.output
    assert len(stored(env)) == 1


def test_the_summary_catches_up_and_no_agent_replies(env, tmp_path):
    """The group's summary job is queued; nothing reaches the inbox or the group's outbox."""
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:3])))
    assert "summary: summary_g1_latest enqueued" in result.output
    with redis.Redis.from_url(env["REDIS_URL"]) as connection:
        job = fetch_job(connection, "summary_g1_latest")
        assert job is not None
        assert job.meta["trigger"] == "import"
        assert job.args == ["g1", None, "import"] or job.args == ("g1", None, "import")
        assert connection.xlen(inbox_stream()) == 0
        assert connection.xlen(outbox_stream("g1")) == 0


def test_a_large_import_is_summarised_to_its_last_message(env, tmp_path):
    """One summary run folds in at most 200 messages: a 450-message import queues runs that
    together reach its newest message."""
    rows = [
        {
            "sender": "alice",
            "text": f"point {n}",
            "created_at": f"2024-03-01T09:{n // 60:02d}:{n % 60:02d}",
        }
        for n in range(450)
    ]
    result = arena("import", "g1", write(tmp_path, jsonl(rows)))
    assert result.exit_code == 0, result.output
    seqs = [s.seq for s in stored_rows(env)]
    for job_id in (f"summary_g1_{seqs[199]}", f"summary_g1_{seqs[399]}", "summary_g1_latest"):
        assert job_id in result.output
    with redis.Redis.from_url(env["REDIS_URL"]) as connection:
        SimpleWorker([queue(connection)], connection=connection, serializer=JSONSerializer).work(
            burst=True, logging_level="ERROR"
        )
    summary = Path(env["ARENA_DATA_DIR"], "memory", "summary_g1.md").read_text()
    assert "450 messages so far" in summary


def live_message(env: dict[str, str], at: datetime) -> None:
    """A person's message as the daemon stores it."""
    engine = make_engine(f"sqlite:///{env['ARENA_DATA_DIR']}/arena.db")
    try:
        write_history(
            engine,
            ChatMessage(
                id="1709280000000-0",
                group="g1",
                sender="user",
                kind=MessageKind.HUMAN,
                text="hello",
                created_at=at,
            ),
        )
    finally:
        engine.dispose()


def test_imported_messages_follow_the_live_ones(env, tmp_path):
    """Messages newer than the group's own go after them, in history order and by date."""
    live_message(env, datetime(2024, 3, 1, 7, 0, tzinfo=UTC))
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:2])))
    assert result.exit_code == 0, result.output
    assert [m.sender for m in stored(env)] == ["user", "alice", "bob"]


def test_without_redis_the_import_still_succeeds(env, tmp_path, monkeypatch, free_port):
    """Redis down: the messages are stored and the user is told how the summary catches up."""
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port}/0")
    result = arena("import", "g1", write(tmp_path, jsonl(GOOD[:2])))
    assert result.exit_code == 0, result.output
    assert "Redis is not reachable" in result.output
    assert "arena summarize g1" in result.output
    assert len(stored(env)) == 2
