"""The console's JSON API against a real uvicorn server, a real Redis and a real SQLite file:
groups, a room's pages with why each agent answered, posting as `arena post` does (and its
refusals), the routing dry run, the status, dead letters and retry, the team."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from click.testing import CliRunner
from sqlalchemy import event
from sqlalchemy.engine import Engine

from orchestrator.cli.main import main
from orchestrator.core.context.report import ContextReport
from orchestrator.core.models import MessageKind, RouteDecision, RouteReason, Usage
from orchestrator.core.wire import deadletter_stream, inbox_stream, validate_post
from orchestrator.errors import ValidationError
from orchestrator.memory.conversation.marker_entries import Rejected, Saved, StoredMarker
from orchestrator.memory.conversation.meta import MarkerMeta, ReplyMeta, TurnMeta
from orchestrator.memory.conversation.run_meta import RunMeta
from orchestrator.memory.conversation.store import Closing, HistoryStore, NewReply
from orchestrator.memory.quick import QuickReader
from orchestrator.settings import Settings
from orchestrator.web.rooms import Rooms
from tests.core.test_context_report import OLD_REPORT, RECALL
from tests.runtime.test_pipeline_meta import OLD_MARKERS
from tests.web_helpers import (
    Served,
    chat_message,
    console_server,
    console_settings,
    run_card,
    run_reply,
    store,
)

HOSTILE = "<img src=x onerror=alert(1)> and <script>alert(2)</script>"


@pytest.fixture
def group() -> str:
    return f"room-{uuid.uuid4().hex[:10]}"


def _env(settings: Settings) -> dict[str, str]:
    return {
        "REDIS_URL": settings.redis_url or "",
        "ARENA_DATA_DIR": str(settings.data_dir),
        "ARENA_AGENTS_DIR": str(settings.agents_dir),
        "ARENA_WORKSPACES_DIR": str(settings.workspaces_dir),
        "ARENA_PROMPTS_DIR": str(settings.prompts_dir),
    }


def _seed_chain(engine: Engine, group: str) -> dict[str, str]:
    """A person's message routed by a rule, ping's reply handing over to pong, pong's reply,
    and a hop-limit notice; ids by role."""
    human = chat_message(group, f"{group}-1", "alex", f"let us play a game {HOSTILE}")
    ping = chat_message(
        group, f"{human.id}:1:ping", "ping", "@pong **your** turn", minutes=1,
        kind=MessageKind.AGENT, in_reply_to=human.id, hop=1,
    )  # fmt: skip
    pong = chat_message(
        group, f"{human.id}:2:pong", "pong", "done", minutes=2,
        kind=MessageKind.AGENT, in_reply_to=human.id, hop=2,
    )  # fmt: skip
    notice = chat_message(
        group, f"{human.id}:3:ping", "arena", "hop limit (3) reached", minutes=3,
        kind=MessageKind.NOTICE, in_reply_to=human.id, hop=3,
    )  # fmt: skip
    ping_meta = ReplyMeta(
        agent="ping",
        trigger=human.id,
        # As an older version stored it: a report with only some layers' tokens.
        context=ContextReport.from_json(
            {"tokens": {"identity": 120, "summary": 0, "history": 40, "total": 160}}
        ),
        turn=TurnMeta(
            provider="anthropic",
            model="claude-test",
            latency_ms=812.5,
            stop_reason="end_turn",
            usage=Usage(input_tokens=100, output_tokens=20, cache_read_tokens=300),
        ),
        markers=MarkerMeta(
            markers=(
                StoredMarker(
                    kind="memory", payload={"type": "decision", "content": "we play chess"}
                ),
                StoredMarker(
                    kind="memory", payload={"type": "fact", "content": "alex likes games"}
                ),
            ),
            saved=(
                Saved(kind="memory", action="added", id=1, type="decision"),
                Saved(kind="memory", action="reinforced", id=2, type="fact"),
            ),
            rejected=(Rejected(kind="memory", reason="secret", detail="an API key"),),
        ),
    )
    rows = [
        NewReply(message=human, status="received"),
        NewReply(message=ping, meta=ping_meta.as_json()),
        NewReply(message=pong, meta=ReplyMeta(agent="pong", trigger=ping.id).as_json()),
        NewReply(
            message=notice,
            meta=ReplyMeta(notice="hop_limit", agent="ping", trigger=pong.id).as_json(),
        ),
    ]
    decision = RouteDecision(
        agents=("ping",), reason=RouteReason.RULE, rule="game", keywords_hit=("game",)
    )
    store(engine, rows, Closing(message_id=human.id, status="done", route=decision.as_dict()))
    return {"human": human.id, "ping": ping.id, "pong": pong.id, "notice": notice.id}


def _by_id(page: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in page["messages"]}


def test_room_shows_why_memory_usage_and_context(api: httpx.Client, served: Served, group: str):
    """Each reply says who wrote it and why, what it wrote to memory, its cost and context."""
    ids = _seed_chain(served.engine, group)
    response = api.get(f"/api/groups/{group}/messages")
    assert response.status_code == 200
    page = response.json()
    assert page["group"] == group
    assert page["before"] is None
    assert [m["id"] for m in page["messages"]] == list(ids.values())
    msgs = _by_id(page)
    human, ping, pong, notice = (msgs[ids[k]] for k in ("human", "ping", "pong", "notice"))
    assert human["kind"] == "human"
    assert human["why"] is None
    assert human["agent"] is None
    assert ping["agent"]["id"] == "ping"
    assert ping["agent"]["name"] == "Ping"
    assert ping["agent"]["colour"].startswith("#")
    assert len(ping["agent"]["colour"]) == 7
    assert ping["why"] == {
        "reason": "rule",
        "rule": "game",
        "keywords": ["game"],
        "from": None,
        "hop": 1,
        "hop_limit": 3,
        "text": "rule game (keywords: game)",
    }
    assert ping["memory"] == [
        {"outcome": "saved", "type": "decision", "text": "we play chess", "reason": None},
        {"outcome": "reinforced", "type": "fact", "text": "alex likes games", "reason": None},
        {"outcome": "rejected", "type": "memory", "text": "", "reason": "secret: an API key"},
    ]
    assert ping["usage"] == {
        "input": 100,
        "output": 20,
        "cache_read": 300,
        "cache_read_share": 0.75,
        "latency_ms": 812.5,
        "model": "claude-test",
    }
    assert ping["context"] == {
        "layers": {"identity": 120, "summary": 0, "history": 40},
        "total": 160,
    }
    assert ping["html"] == "<p>@pong <strong>your</strong> turn</p>\n"
    assert pong["why"]["reason"] == "handoff"
    assert pong["why"]["from"] == "ping"
    assert pong["why"]["text"] == "hand-off from ping, hop 2 of 3"
    assert pong["usage"] is None
    assert notice["kind"] == "notice"
    assert notice["notice"] == "hop_limit"
    assert notice["agent"] is None


def test_room_shows_old_marker_entries_as_before(api: httpx.Client, served: Served, group: str):
    """A reply stored with old or hand-made marker entries shows the same memory lines:
    what is missing reads as empty, what is not an entry is skipped."""
    human = chat_message(group, f"{group}-1", "alex", "@ping hello")
    reply = chat_message(
        group, f"{group}-1:1:ping", "ping", "noted", kind=MessageKind.AGENT, in_reply_to=human.id
    )
    meta = {"agent": "ping", "trigger": human.id, **OLD_MARKERS}
    store(served.engine, [NewReply(message=human), NewReply(message=reply, meta=meta)])
    page = api.get(f"/api/groups/{group}/messages")
    assert page.status_code == 200, page.text
    assert _by_id(page.json())[reply.id]["memory"] == [
        {"outcome": "saved", "type": "decision", "text": "we play chess", "reason": None},
        {"outcome": "reinforced", "type": "fact", "text": "alex likes games", "reason": None},
        {"outcome": "saved", "type": "personal", "text": "", "reason": None},
        {"outcome": "saved", "type": "", "text": "", "reason": None},
        {"outcome": "rejected", "type": "memory", "text": "", "reason": "secret: an API key"},
        {"outcome": "rejected", "type": "", "text": "", "reason": "duplicate"},
        {"outcome": "rejected", "type": "personal", "text": "", "reason": "schema"},
    ]


def test_hostile_text_is_escaped_in_html(api: httpx.Client, served: Served, group: str):
    """HTML in a message comes back as text in ``html``: nothing can run or load."""
    ids = _seed_chain(served.engine, group)
    human = _by_id(api.get(f"/api/groups/{group}/messages").json())[ids["human"]]
    assert human["text"].endswith(HOSTILE)
    assert "<img" not in human["html"]
    assert "<script" not in human["html"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in human["html"]


def test_a_run_card_and_its_reply_carry_the_run(api: httpx.Client, served: Served, group: str):
    """The card has its run as it started and the agent whose run it is; the reply how it
    ended; any other message has no ``run`` key."""
    human = chat_message(group, f"{group}-1", "alex", "@ping create hello.py")
    card = run_card(human, "ping", "code rule implement")
    run_id = card.message.id.removesuffix(":run")
    ended = RunMeta(
        id=run_id, status="failed", why="code rule implement", files=("a.py", "b.py"),
        stat=" a.py | +1 -0\n b.py | +2 -1", commit="0123456789ab", merged=False,
        branch="arena/run-1", reason="tests failed", turns=4, duration_ms=5300, cost_usd=0.0125,
    )  # fmt: skip
    store(served.engine, [NewReply(message=human), card, run_reply(human, "ping", ended, "Oops")])
    shown = _by_id(api.get(f"/api/groups/{group}/messages").json())
    assert "run" not in shown[human.id]
    on_card = shown[card.message.id]
    assert on_card["notice"] == "run"
    assert on_card["run"]["status"] == "queued"
    assert on_card["run"]["why"] == "code rule implement"
    assert on_card["run"]["agent"]["name"] == "Ping"
    on_reply = shown[run_id]["run"]
    assert {k: v for k, v in on_reply.items() if k != "agent"} == ended.as_json()
    assert on_reply["agent"]["id"] == "ping"


def test_mention_and_default_reasons(api: httpx.Client, served: Served, group: str):
    """A mention names who mentioned; the default agent says so; an unclosed message's reply
    gets the routing the message will record."""
    asked = chat_message(group, f"{group}-m", "sam", "@helper hi")
    open_ = chat_message(group, f"{group}-o", "sam", "nothing special", minutes=2)
    rows = [
        NewReply(message=asked, status="received"),
        NewReply(
            message=chat_message(
                group,
                f"{asked.id}:1:helper",
                "helper",
                "hello",
                minutes=1,
                kind=MessageKind.AGENT,
                in_reply_to=asked.id,
                hop=1,
            ),
            meta=ReplyMeta(agent="helper", trigger=asked.id).as_json(),
        ),
        NewReply(message=open_, status="received"),
        NewReply(
            message=chat_message(
                group,
                f"{open_.id}:1:helper",
                "helper",
                "hm",
                minutes=3,
                kind=MessageKind.AGENT,
                in_reply_to=open_.id,
                hop=1,
            ),
            meta=ReplyMeta(agent="helper", trigger=open_.id).as_json(),
        ),
    ]
    mention = RouteDecision(agents=("helper",), reason=RouteReason.MENTION)
    store(served.engine, rows, Closing(message_id=asked.id, status="done", route=mention.as_dict()))
    msgs = _by_id(api.get(f"/api/groups/{group}/messages").json())
    assert msgs[f"{asked.id}:1:helper"]["why"]["text"] == "mentioned by sam"
    assert msgs[f"{asked.id}:1:helper"]["why"]["from"] == "sam"
    assert msgs[f"{open_.id}:1:helper"]["why"]["reason"] == "default"
    assert msgs[f"{open_.id}:1:helper"]["why"]["text"] == "default agent"


def test_pages_by_seq_without_gaps_or_repeats(api: httpx.Client, served: Served, group: str):
    """``before`` walks back a page at a time to the first message, then is null."""
    rows = [
        NewReply(message=chat_message(group, f"{group}-{i}", "alex", f"m{i}", minutes=i))
        for i in range(7)
    ]
    store(served.engine, rows)
    seen: list[str] = []
    before = None
    for _ in range(5):
        params: dict[str, Any] = {"limit": 3} | ({"before": before} if before else {})
        page = api.get(f"/api/groups/{group}/messages", params=params).json()
        seen = [m["text"] for m in page["messages"]] + seen
        before = page["before"]
        if before is None:
            break
    assert seen == [f"m{i}" for i in range(7)]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 201}, {"before": "abc"}, {"before": 0}])
def test_bad_page_parameters_are_422(api: httpx.Client, served: Served, group: str, params):
    """A limit out of 1..200 or a cursor that is not a seq: 422 with one line."""
    store(served.engine, [NewReply(message=chat_message(group, f"{group}-1", "a", "x"))])
    response = api.get(f"/api/groups/{group}/messages", params=params)
    assert response.status_code == 422
    assert list(response.json()) == ["error"]
    assert "\n" not in response.json()["error"]


@pytest.mark.parametrize("name", ["no-such-room", "Not A Group"])
def test_unknown_group_is_404(api: httpx.Client, name: str):
    """A group with no messages (or that cannot exist) is 404."""
    response = api.get(f"/api/groups/{name}/messages")
    assert response.status_code == 404
    assert response.json() == {"error": f"no group {name!r}"}


def test_events_of_a_group_that_cannot_exist_are_404(api: httpx.Client):
    """A name no group can have: 404 (a new group's events can be followed before its first
    message, which is how a group is made)."""
    response = api.get("/api/groups/Not A Group/events")
    assert response.status_code == 404
    assert response.json() == {"error": "no group 'Not A Group'"}


def test_groups_newest_activity_first(api: httpx.Client, served: Served):
    """Groups come with their count, last activity and last sender, newest first."""
    old, new = f"old-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"
    store(served.engine, [NewReply(message=chat_message(old, f"{old}-1", "a", "x", minutes=-60))])
    store(
        served.engine,
        [
            NewReply(message=chat_message(new, f"{new}-1", "a", "x", minutes=600)),
            NewReply(message=chat_message(new, f"{new}-2", "bea", "y", minutes=601)),
        ],
    )
    groups = api.get("/api/groups").json()["groups"]
    names = [g["group"] for g in groups]
    assert names.index(new) < names.index(old)
    entry = groups[names.index(new)]
    assert entry["messages"] == 2
    assert entry["last_sender"] == "bea"
    assert entry["last_at"].startswith("2026-01-05T19:01:00")


def test_post_goes_to_the_inbox_as_arena_post(api: httpx.Client, served: Served, group: str):
    """202 with the id; the inbox entry is the one `arena post` writes."""
    response = api.post(f"/api/groups/{group}/messages", json={"text": "hello *there*"})
    assert response.status_code == 202
    message_id = response.json()["id"]
    with redis.Redis.from_url(served.redis_url, decode_responses=True) as r:
        [(_, fields)] = r.xrange(inbox_stream(), message_id, message_id)
    assert fields == {"group": group, "text": "hello *there*", "sender": "user"}
    sent = api.post(f"/api/groups/{group}/messages", json={"text": "hi", "sender": "alex"})
    with redis.Redis.from_url(served.redis_url, decode_responses=True) as r:
        [(_, fields)] = r.xrange(inbox_stream(), sent.json()["id"], sent.json()["id"])
    assert fields["sender"] == "alex"


def _cli_reason(group: str, text: str, sender: str = "user") -> str:
    try:
        validate_post(group, text, sender, 32 * 1024)
    except ValidationError as exc:
        return str(exc)
    raise AssertionError("accepted")


@pytest.mark.parametrize(
    ("group_name", "body", "status"),
    [
        ("ok-room", {"text": "x" * (32 * 1024 + 1)}, 413),
        ("ok-room", {"text": ""}, 400),
        ("ok-room", {"text": "bell \x07"}, 400),
        ("ok-room", {"text": "hi", "sender": "no spaces allowed here!"}, 400),
        ("Bad Room", {"text": "hi"}, 400),
    ],
)
def test_post_refusals_give_the_cli_reason(api: httpx.Client, group_name, body, status):
    """Oversized, empty, control characters, a bad sender or group: 4xx, the CLI's line."""
    response = api.post(f"/api/groups/{group_name}/messages", json=body)
    assert response.status_code == status
    expected = _cli_reason(group_name, body["text"], body.get("sender", "user"))
    assert response.json() == {"error": expected}


@pytest.mark.parametrize("content", [b"{not json", b'{"sender": "a"}', b'{"text": 5}', b"[]"])
def test_malformed_posts_are_422(api: httpx.Client, group: str, content: bytes):
    """A body that is not the JSON object asked for: 422, one line."""
    response = api.post(
        f"/api/groups/{group}/messages",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert "\n" not in response.json()["error"]
    if content in (b"{not json", b"[]"):
        assert response.json()["error"].startswith("body: expected a JSON object")


def test_a_huge_body_is_refused_before_it_is_read(api: httpx.Client, group: str):
    """Megabytes of JSON: 413 from its length alone."""
    body = json.dumps({"text": "x" * 2_000_000}).encode()
    response = api.post(
        f"/api/groups/{group}/messages",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert "32768" in response.json()["error"]


def test_route_is_arena_route_json(api: httpx.Client, served: Served):
    """The dry run prints what `arena route --json` does."""
    text = "shall we play a game?"
    cli = CliRunner().invoke(main, ["route", text, "--json"], env=_env(served.settings))
    assert cli.exit_code == 0, cli.output
    response = api.get("/api/route", params={"text": text})
    assert response.status_code == 200
    assert response.json() == json.loads(cli.stdout)
    assert api.get("/api/route").status_code == 422


def test_status_is_arena_status_json(api: httpx.Client, served: Served, group: str):
    """The same report as `arena status --json` (the same keys, groups and agents)."""
    store(served.engine, [NewReply(message=chat_message(group, f"{group}-1", "a", "x"))])
    response = api.get("/api/status")
    assert response.status_code == 200
    web = response.json()
    cli = CliRunner().invoke(main, ["status", "--json"], env=_env(served.settings))
    printed = json.loads(cli.stdout)
    assert web.keys() == printed.keys()
    assert web["groups"] == printed["groups"]
    assert [a["id"] for a in web["agents"]] == ["helper", "ping", "pong"]
    assert group in [g["group"] for g in web["groups"]]


def test_dead_letters_and_retry(api: httpx.Client, served: Served, group: str):
    """Dead letters as `arena dead-letters --json`; retry posts again and removes it."""
    with redis.Redis.from_url(served.redis_url) as r:
        r.delete(deadletter_stream())
        letter = r.xadd(
            deadletter_stream(),
            {
                "entry_id": "1-1",
                "reason": "model failed",
                "field:group": group,
                "field:text": "try me again",
                "field:sender": "alex",
            },
        ).decode()
    listed = api.get("/api/dead-letters").json()["dead_letters"]
    cli = CliRunner().invoke(main, ["dead-letters", "--json"], env=_env(served.settings))
    assert listed == json.loads(cli.stdout)
    assert listed[0]["id"] == letter
    assert listed[0]["text"] == "try me again"
    retried = api.post(f"/api/dead-letters/{letter}/retry")
    assert retried.status_code == 202
    new_id = retried.json()["id"]
    with redis.Redis.from_url(served.redis_url, decode_responses=True) as r:
        [(_, fields)] = r.xrange(inbox_stream(), new_id, new_id)
    assert fields == {"group": group, "text": "try me again", "sender": "alex"}
    assert api.get("/api/dead-letters").json() == {"dead_letters": []}
    again = api.post(f"/api/dead-letters/{letter}/retry")
    assert again.status_code == 404
    assert again.json()["error"].startswith("id: no dead letter")
    assert api.post("/api/dead-letters/nonsense/retry").status_code == 400


def test_agents(api: httpx.Client):
    """The team with names, roles, colours (stable) and descriptions."""
    first = api.get("/api/agents").json()["agents"]
    assert [a["id"] for a in first] == ["helper", "ping", "pong"]
    assert first[0]["name"] == "Helper"
    assert first[0]["role"] == "receptionist"
    assert {a["colour"] for a in first} == {
        a["colour"] for a in api.get("/api/agents").json()["agents"]
    }
    assert len({a["colour"] for a in first}) == 3


def test_openapi_and_docs(api: httpx.Client):
    """The schema lists the API; /docs is a page of it that runs no script."""
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/api/groups", "/api/groups/{group}/messages", "/api/groups/{group}/events",
                 "/api/route", "/api/status", "/api/dead-letters", "/api/agents",
                 "/api/dead-letters/{dead_letter_id}/retry"):  # fmt: skip
        assert path in paths
    docs = api.get("/docs")
    assert docs.status_code == 200
    assert "/api/groups/{group}/messages" in docs.text
    assert "<script" not in docs.text


@pytest.mark.parametrize(
    "path",
    ["/", "/status", "/agents", "/agents/ping", "/memory", "/context", "/groups/demo", "/docs",
     "/api/groups", "/api/agents", "/openapi.json", "/metrics", "/static/console.css"],
)  # fmt: skip
def test_head_answers_as_get_without_a_body(api: httpx.Client, path: str):
    """HEAD of a page, the API, the metrics or a static file: GET's status and headers, no
    body."""
    get, head = api.get(path), api.head(path)
    assert (head.status_code, get.status_code) == (200, 200), head.text
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    if path != "/metrics":  # its numbers move between the two requests
        assert head.headers["content-length"] == str(len(get.content))


def test_pages_use_the_group_and_seq_index(served: Served, group: str, tmp_path: Path):
    """The page query is answered from the (group_id, seq) index: no scan, no sort."""
    store(served.engine, [NewReply(message=chat_message(group, f"{group}-1", "a", "x"))])
    statements: list[tuple[str, Any]] = []

    def keep(conn, cursor, statement, parameters, context, executemany):
        if "FROM messages" in statement and "ORDER BY" in statement:
            statements.append((statement, parameters))

    # On SQLite the page is read straight through the driver (QuickReader), else SQLAlchemy.
    rows = QuickReader.rows

    def kept_rows(reader: QuickReader, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        if "FROM messages" in sql and "ORDER BY" in sql:
            statements.append((sql, tuple(params)))
        return rows(reader, sql, params)

    event.listen(served.engine, "before_cursor_execute", keep)
    QuickReader.rows = kept_rows  # type: ignore[method-assign]
    try:
        page = Rooms(HistoryStore(served.engine), (), hop_limit=3).page(group, before=100, limit=50)
    finally:
        QuickReader.rows = rows  # type: ignore[method-assign]
        event.remove(served.engine, "before_cursor_execute", keep)
    assert page
    assert statements
    statement, parameters = statements[0]
    with sqlite3.connect(served.engine.url.database) as db:
        plan = " ".join(
            row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)
        )
    assert "USING INDEX" in plan or "USING INTEGER PRIMARY KEY" in plan, plan
    assert "SCAN" not in plan, plan
    assert "TEMP B-TREE" not in plan, plan


def test_a_failure_is_one_json_line(tmp_path: Path, embedded_redis_url: str):
    """A database that lost its table: 500 with one JSON line, not a traceback."""
    settings = console_settings(tmp_path, embedded_redis_url)
    with console_server(settings) as base:
        with sqlite3.connect(settings.data_dir / "arena.db") as db:
            db.execute("DROP TABLE messages")
        response = httpx.get(f"{base}/api/groups", timeout=5)
    assert response.status_code == 500
    assert response.json() == {"error": "the console failed (see its log)"}


def test_an_old_reply_report_is_served_as_it_was_stored(api: httpx.Client, served: Served):
    """`GET /api/messages/{id}/report` on a reply stored before recall_dropped existed sends
    its report and recall as stored, and its room shows the report's tokens."""
    group = "report-old"
    human = chat_message(group, f"{group}-1", "alex", "@ping hello")
    reply = chat_message(
        group, f"{group}-1:1:ping", "ping", "hi", kind=MessageKind.AGENT, in_reply_to=human.id
    )
    meta = {"agent": "ping", "trigger": human.id, "recall": RECALL, "context": OLD_REPORT}
    store(served.engine, [NewReply(message=human), NewReply(message=reply, meta=meta)])
    answer = api.get(f"/api/messages/{reply.id}/report")
    room = api.get(f"/api/groups/{group}/messages")
    assert answer.status_code == 200, answer.text
    assert json.dumps(answer.json()["report"]) == json.dumps(OLD_REPORT)
    assert answer.json()["recall"] == RECALL
    shown = next(m for m in room.json()["messages"] if m["id"] == reply.id)
    layers = {k: v for k, v in OLD_REPORT["tokens"].items() if k != "total"}
    assert shown["context"] == {"layers": layers, "total": 438}
    assert ReplyMeta.from_json(meta).as_json() == meta
