"""The room's live events (server-sent events from the outbound stream, and the steps of the
room's runs from the steps stream) on a real uvicorn server: ids, resuming after
``Last-Event-ID`` without loss or repeats, the stream's end as the start (after the steps so
far of runs still going), keep-alives; and with a real daemon, a post's reply arriving with why
it was written."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy.engine import Engine

from orchestrator.core.coding import Step, steps_stream
from orchestrator.core.models import MessageKind, RouteDecision, RouteReason
from orchestrator.core.wire import Outbound, outbox_stream
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.run_meta import RunMeta
from orchestrator.memory.conversation.store import Closing, NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunStore, StoredStep
from tests.waiting import block_until
from tests.web_helpers import (
    chat_message,
    console_server,
    console_settings,
    events_of,
    own_redis,
    read_events,
    run_card,
    run_reply,
    store,
)


@dataclass(frozen=True, slots=True)
class Served:
    base: str
    engine: Engine
    redis: redis.Redis


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("web-events")
    with own_redis(folder / "redis") as url:
        settings = console_settings(folder, url)
        engine = make_engine(settings.effective_database_url)
        with console_server(settings, keepalive_s=0.3) as base, redis.Redis.from_url(url) as r:
            yield Served(base=base, engine=engine, redis=r)
        engine.dispose()


@pytest.fixture
def group() -> str:
    return f"room-{uuid.uuid4().hex[:10]}"


def _reply(group: str, n: int, root: str = "m-1") -> Outbound:
    return Outbound(
        type="reply",
        id=f"{root}:{n}:ping",
        group=group,
        in_reply_to=root,
        sender="ping",
        kind="agent",
        text=f"reply {n} <b>bold</b>",
        hop=n,
        created_at="2026-01-05T09:00:00+00:00",
    )


def _add(served: Served, item: Outbound) -> str:
    entry_id = served.redis.xadd(outbox_stream(item.group), item.fields())  # type: ignore[arg-type]
    return entry_id.decode()


def _events(served: Served, group: str, count: int, wait_s: float = 10, **headers: str):
    params = {"after": headers.pop("after")} if "after" in headers else {}
    url = f"{served.base}/api/groups/{group}/events"
    with httpx.stream("GET", url, params=params, headers=headers, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return read_events(response, count, timeout_s=wait_s)


def test_events_carry_stream_ids_and_messages(served: Served, group: str):
    """A stored reply comes as its stored message with why; one not stored yet from its
    fields; ``done`` with the count; each with its stream entry id."""
    human = chat_message(group, "m-1", "alex", "a game?")
    stored = chat_message(
        group, "m-1:1:ping", "ping", "stored reply", minutes=1,
        kind=MessageKind.AGENT, in_reply_to="m-1", hop=1,
    )  # fmt: skip
    decision = RouteDecision(agents=("ping",), reason=RouteReason.RULE, rule="game")
    store(
        served.engine,
        [
            NewReply(message=human),
            NewReply(message=stored, meta=ReplyMeta(agent="ping", trigger="m-1").as_json()),
        ],
        Closing(message_id="m-1", status="done", route=decision.as_dict()),
    )
    ids = [
        _add(served, _reply(group, 1)),
        _add(served, _reply(group, 2)),
        _add(served, Outbound.done("m-1", group, 2)),
    ]
    events = _events(served, group, 3, after="0-0")
    assert [e.id for e in events] == ids
    assert [e.event for e in events] == ["reply", "reply", "done"]
    assert events[0].data["text"] == "stored reply"
    assert events[0].data["why"]["text"] == "rule game"
    assert events[0].data["seq"] > 0
    assert events[1].data["text"] == "reply 2 <b>bold</b>"
    assert events[1].data["html"] == "<p>reply 2 &lt;b&gt;bold&lt;/b&gt;</p>\n"
    assert events[1].data["why"] is None
    assert events[1].data["agent"]["id"] == "ping"
    assert events[2].data == {"in_reply_to": "m-1", "replies": 2}


def test_resume_after_last_event_id_without_loss_or_repeats(served: Served, group: str):
    """Reconnecting with ``Last-Event-ID`` (or ``?after=``) gives every later item once,
    across more items than one read takes."""
    ids = [_add(served, _reply(group, n)) for n in range(1, 251)]
    first = _events(served, group, 100, after="0-0")
    assert [e.id for e in first] == ids[:100]
    rest = _events(served, group, 150, **{"last-event-id": first[-1].id})
    assert [e.id for e in rest] == ids[100:]
    assert [e.data["id"] for e in first + rest] == [f"m-1:{n}:ping" for n in range(1, 251)]
    assert _events(served, group, 1, wait_s=1, after=ids[-1]) == []  # nothing after the last


def test_without_an_id_the_stream_starts_at_its_end(served: Served, group: str):
    """Items already there are not replayed; new ones come."""
    _add(served, _reply(group, 1))
    url = f"{served.base}/api/groups/{group}/events"
    with httpx.stream("GET", url, timeout=10) as response:
        new = _add(served, _reply(group, 2))
        [event] = read_events(response, 1, timeout_s=10)
    assert event.id == new


def test_keep_alive_comments(served: Served, group: str):
    """An idle stream sends ``: keep-alive`` comments."""
    url = f"{served.base}/api/groups/{group}/events"
    with httpx.stream("GET", url, timeout=10) as response:
        for line in response.iter_lines():
            if line == ": keep-alive":
                break
        else:
            pytest.fail("the stream closed without a keep-alive")


@pytest.mark.parametrize("bad", ["yesterday", "1-2-3", "$", "1-0~", "1-0~x", "1-0~2-0~3-0"])
def test_a_bad_event_id_is_400(served: Served, group: str, bad: str):
    """A resume point that is not a stream entry id: 400, one line."""
    response = httpx.get(
        f"{served.base}/api/groups/{group}/events", headers={"last-event-id": bad}, timeout=5
    )
    assert response.status_code == 400
    assert bad in response.json()["error"]


def test_a_post_is_answered_live_with_why(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """With a real daemon (offline model): post through the API, the reply arrives on the
    events with its agent, why it answered and what it cost, then ``done``."""
    settings = console_settings(
        tmp_path, embedded_redis_url, mqtt_url=embedded_mqtt_url, shutdown_timeout_s=5
    )
    with console_server(settings, with_daemon=True, keepalive_s=0.5) as base:
        url = f"{base}/api/groups/live/events"
        with httpx.stream("GET", url, timeout=30) as response:
            posted = httpx.post(f"{base}/api/groups/live/messages", json={"text": "@pong hi"})
            assert posted.status_code == 202
            reply, done = read_events(response, 2, timeout_s=30)
        page = httpx.get(f"{base}/api/groups/live/messages").json()
    assert reply.event == "reply"
    assert reply.data["in_reply_to"] == posted.json()["id"]
    assert reply.data["agent"]["id"] == "pong"
    assert reply.data["why"]["reason"] == "mention"
    assert reply.data["why"]["text"] == "mentioned by user"
    assert reply.data["usage"]["model"]
    assert done.event == "done"
    assert done.data == {"in_reply_to": posted.json()["id"], "replies": 1}
    assert [m["id"] for m in page["messages"]] == [posted.json()["id"], reply.data["id"]]
    assert page["messages"][1]["why"] == reply.data["why"]


def _clients(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    line = next(x for x in text.splitlines() if x.startswith("arena_sse_clients "))
    return float(line.split()[1])


def test_the_metrics_count_event_stream_clients(served: Served, group: str):
    """``arena_sse_clients`` counts open streams; a client that leaves is no longer counted
    (noticed at the next keep-alive)."""
    before = _clients(served.base)
    url = f"{served.base}/api/groups/{group}/events"
    with httpx.stream("GET", url, timeout=10) as response:
        lines = response.iter_lines()  # kept: a dropped iterator closes the response
        next(lines)
        assert _clients(served.base) == before + 1
    block_until(
        lambda: _clients(served.base) == before, timeout_s=5, what="the client to be forgotten"
    )


T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _step(run: str, n: int, line: str) -> Step:
    kind = "result" if line == "ok" else "tool"
    return Step(run=run, n=n, at=T0.isoformat(), kind=kind, line=line, tool="Write")


def _add_step(served: Served, group: str, step: Step) -> str:
    entry_id = served.redis.xadd(steps_stream(group), step.fields())  # type: ignore[arg-type]
    return entry_id.decode()


def _seed_run(served: Served, group: str) -> tuple[str, list[str]]:
    """A run's card (stored, then on the outbox), two steps and its reply: the run's id and
    the entry ids, in order (outbox, steps, steps, outbox)."""
    human = chat_message(group, f"{group}-1", "alex", "@ping create hello.py")
    card = run_card(human, "ping", "code rule implement")
    run_id = card.message.id.removesuffix(":run")
    ended = RunMeta(
        id=run_id, status="done", why="code rule implement", files=("hello.py",),
        stat=" hello.py | +1 -0", commit="abc1234def", merged=True, turns=2,
    )  # fmt: skip
    store(served.engine, [NewReply(message=human), card, run_reply(human, "ping", ended, "Done")])
    notice = Outbound.for_message(card.message)
    ids = [_add(served, notice)]
    ids += [
        _add_step(served, group, _step(run_id, n, line)) for n, line in ((1, "Write a"), (2, "ok"))
    ]
    reply = Outbound(type="reply", id=run_id, group=group, in_reply_to=human.id, sender="ping",
                     kind="agent", text="Done", hop=1)  # fmt: skip
    ids.append(_add(served, reply))
    return run_id, ids


def test_steps_come_between_a_runs_card_and_its_reply(served: Served, group: str):
    """The card (with its run and agent), each step as a ``step`` event, the reply (with how
    the run ended); once a step was sent, an id says where both streams are."""
    run_id, (card, one, two, reply) = _seed_run(served, group)
    events = _events(served, group, 4, after="0-0")
    assert [e.event for e in events] == ["notice", "step", "step", "reply"]
    assert [e.id for e in events] == [card, f"{card}~{one}", f"{card}~{two}", f"{reply}~{two}"]
    assert events[0].data["notice"] == "run"
    run = events[0].data["run"]
    assert (run["id"], run["status"], run["why"]) == (run_id, "queued", "code rule implement")
    assert run["agent"]["id"] == "ping"
    assert events[1].data == _step(run_id, 1, "Write a").as_dict()
    assert events[2].data["line"] == "ok"
    ended = events[3].data["run"]
    assert (ended["status"], ended["files"], ended["commit"]) == (
        "done",
        ["hello.py"],
        "abc1234def",
    )


def test_resume_after_a_step_gets_the_rest_once(served: Served, group: str):
    """Reconnecting with the id of a step gives the later steps and items, none twice; with
    the id of the last, nothing."""
    _seed_run(served, group)
    first = _events(served, group, 2, after="0-0")
    rest = _events(served, group, 3, wait_s=2, **{"last-event-id": first[-1].id})
    assert [(e.event, e.data.get("line")) for e in rest] == [("step", "ok"), ("reply", None)]
    assert _events(served, group, 1, wait_s=1, after=rest[-1].id) == []


def test_a_plain_id_resumes_the_steps_from_its_millisecond(served: Served, group: str):
    """An outbound entry id alone (a room's id before any step was sent) resumes the steps
    from its millisecond on: not those before, those of the same millisecond again (they may
    have been sent: ids tell no more across streams)."""
    served.redis.xadd(outbox_stream(group), _reply(group, 1).fields(), id="2000-0")  # type: ignore[arg-type]
    for entry_id, n in (("1999-5", 1), ("2000-0", 2), ("2001-0", 3)):
        step = _step("r", n, "Write a").fields()
        served.redis.xadd(steps_stream(group), step, id=entry_id)  # type: ignore[arg-type]
    events = _events(served, group, 3, wait_s=2, after="2000-0")
    assert [(e.id, e.data["n"]) for e in events] == [("2000-0~2000-0", 2), ("2000-0~2001-0", 3)]


def test_a_room_opened_mid_run_gets_the_steps_so_far(served: Served, group: str):
    """Without an id: the steps the database kept of the room's runs still going come first
    (not those of a run that ended), then the live ones."""
    runs = RunStore(served.engine)
    for run_id in (f"m-1:1:ping-{group}", f"m-1:1:pong-{group}"):
        runs.create(run_id=run_id, group=group, agent="ping", trigger_id="m-1", root_id="m-1",
                    hop=1, why="code rule implement", now=T0)  # fmt: skip
        for n, line in ((1, "Write a"), (2, "ok")):
            runs.add_step(run_id, StoredStep(n=n, at=T0, kind="tool", line=line, tool="Write"))
    ended = f"m-1:1:pong-{group}"
    runs.finish(ended, status="done", text="", problem=None, outcome={}, now=T0)
    going = f"m-1:1:ping-{group}"
    url = f"{served.base}/api/groups/{group}/events"
    with httpx.stream("GET", url, timeout=10) as response:
        lines = response.iter_lines()
        events = events_of(lines, 2, timeout_s=10)
        _add_step(served, group, _step(going, 3, "Write b"))
        events += events_of(lines, 1, timeout_s=10)
    assert [(e.data["run"], e.data["n"]) for e in events] == [(going, 1), (going, 2), (going, 3)]
