"""Helpers shared by the daemon tests: a test team of agents and a daemon running in-process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.core.models import AgentSpec, ChatMessage, LLMRequest, MessageKind
from orchestrator.core.turns import LLM
from orchestrator.core.wire import Outbound, outbox_stream
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.runtime import daemon
from orchestrator.runtime.pipeline import Pipeline
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent

TEAM_YAML = {
    "helper": """
        id: helper
        name: Helper
        role: receptionist
        model: claude-test
        default: true
    """,
    "ping": """
        id: ping
        name: Ping
        role: first player
        model: claude-test
        routing:
          rules:
            - name: game
              keywords: [game]
              priority: 10
    """,
    "pong": """
        id: pong
        name: Pong
        role: second player
        model: claude-test
        routing:
          rules:
            - name: short-cjk
              max_length: 12
              patterns: ['[\\u4e00-\\u9fff]']
              priority: 20
    """,
}


def write_team(folder: Path) -> Path:
    """Write the test team's YAML files into ``folder/agents`` and return that folder."""
    agents = folder / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    for agent_id, text in TEAM_YAML.items():
        (agents / f"{agent_id}.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return agents


def make_settings(
    tmp_path: Path, redis_url: str, mqtt_url: str, base_url: str | None, **extra: Any
) -> Settings:
    """Settings for a daemon under ``tmp_path`` talking to the given servers."""
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "mqtt_url": mqtt_url,
        "data_dir": tmp_path / "data",
        "agents_dir": write_team(tmp_path),
        "workspaces_dir": tmp_path / "workspaces",
        "prompts_dir": REPO / "prompts",
        "consumer": "test-daemon",
        "model_max_retries": 0,
        "model_timeout_s": 10,
        "shutdown_timeout_s": 5,
    }
    if base_url is not None:
        values["anthropic_api_key"] = "test"
        values["anthropic_base_url"] = base_url
    values.update(extra)
    (tmp_path / "data").mkdir(exist_ok=True)
    return load_settings(**values)


@contextlib.asynccontextmanager
async def running_daemon(settings: Settings) -> AsyncIterator[asyncio.Task[None]]:
    """Run the daemon in this event loop until the block ends."""
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(daemon.run(settings, stop, ready=ready.set))
    async with asyncio.timeout(30):
        done, _ = await asyncio.wait(
            [task, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED
        )
    if task in done:
        task.result()  # raises what went wrong at start
    try:
        yield task
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await task


def environment(settings: Settings) -> dict[str, str]:
    """The variables that make `arena` (a process, or the CLI in this one) read ``settings``'
    servers and folders."""
    return {
        "REDIS_URL": settings.redis_url or "",
        "MQTT_URL": settings.mqtt_url or "",
        "ARENA_DATA_DIR": str(settings.data_dir),
        "ARENA_AGENTS_DIR": str(settings.agents_dir),
        "ARENA_WORKSPACES_DIR": str(settings.workspaces_dir),
        "ARENA_PROMPTS_DIR": str(settings.prompts_dir),
    }


def set_environment(monkeypatch: pytest.MonkeyPatch, settings: Settings, **extra: str) -> None:
    """Make `arena` run in this process read ``settings`` (and the ``extra`` variables)."""
    for name, value in {**environment(settings), **extra}.items():
        monkeypatch.setenv(name, value)


def set_team_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra: str
) -> dict[str, str]:
    """Make `arena` run in this process use the test team and folders under ``tmp_path``
    (and the ``extra`` variables); the data folder is made. Returns the variables set."""
    values = {
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
        "ARENA_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
        **extra,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "data").mkdir()
    return values


def spawn_daemon(
    settings: Settings, log: Path, consumer: str, **env: str
) -> subprocess.Popen[bytes]:
    """Start ``arena daemon`` as a process of its own (output appended to ``log``).

    ``env`` adds or overrides variables, e.g. ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL``
    for a fake model (else it is offline).
    """
    values = {
        "PATH": os.environ.get("PATH", ""),
        **environment(settings),
        "ARENA_CONSUMER": consumer,
        "ARENA_MODEL_MAX_RETRIES": "0",
        **env,
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "daemon"],
            cwd=REPO,
            env=values,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Its own process group, so that a test can end it and what it started at once.
            start_new_session=True,
        )


@contextlib.contextmanager
def worker_process(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``arena worker`` as a process of its own with exactly ``env``, its output in ``log``;
    it and what it started are killed when the block ends."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "worker"],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


class RecordingOutbox:
    """An outbox that keeps what is appended, once per id (as the Redis one does)."""

    def __init__(self) -> None:
        self.items: list[Outbound] = []

    async def publish_all(self, items: Sequence[Outbound]) -> int:
        new = [item for item in items if all(i.id != item.id for i in self.items)]
        self.items.extend(new)
        return len(new)


class RecordingEvents:
    """An MQTT publisher that keeps what is published, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []

    def publish(self, topic: str, payload: bytes) -> None:
        self.events.append((topic, payload))

    @property
    def payloads(self) -> list[bytes]:
        return [payload for _topic, payload in self.events]


def make_pipeline(
    settings: Settings, store: HistoryStore, llm: LLM, **options: Any
) -> tuple[Pipeline, RecordingOutbox, RecordingEvents]:
    """The daemon's pipeline for the team of ``settings`` over ``store``, with ``options`` (e.g.
    ``memory``, ``clock``); what it publishes is kept by the outbox and events returned."""
    outbox, events = RecordingOutbox(), RecordingEvents()
    wiring = Wiring(settings, store.engine)
    pipeline = Pipeline(
        team=wiring.team,
        store=store,
        outbox=outbox,
        events=events,
        llm=llm,
        prompts=wiring.prompts,
        briefing=wiring.briefing(),
        tuning=wiring.tuning,
        transcript=wiring.transcript,
        **options,
    )
    return pipeline, outbox, events


def start_background(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``argv`` started in the checkout in a session of its own (so that its whole process
    group can be stopped), its output and errors read as text from ``stdout``."""
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL its process group after 20 s; its output pipe closed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def read_until(proc: subprocess.Popen[str], wanted: str, timeout_s: float) -> list[str]:
    """The lines a text-mode process prints up to the first that holds ``wanted``
    (AssertionError if it ends or ``timeout_s`` passes first)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if wanted in line:
            return lines
    raise AssertionError(f"{wanted!r} not printed; got {lines}")


def agent_of(request: dict[str, Any]) -> str:
    """The id of the agent a Messages API request was made for (from its system prompt)."""
    system = request.get("system")
    text = system if isinstance(system, str) else " ".join(b["text"] for b in system or [])
    match = re.search(r"\(id: ([a-z0-9_-]+)\)", text)
    return match.group(1) if match else "?"


def group_of(request: dict[str, Any]) -> str:
    """The group a Messages API request was made in (from its system prompt)."""
    system = request.get("system")
    text = system if isinstance(system, str) else " ".join(b["text"] for b in system or [])
    match = re.search(r'group chat "([a-z0-9_-]+)"', text)
    return match.group(1) if match else "?"


def outbox(redis_url: str, group: str) -> list[dict[str, str]]:
    """Every item on a group's outbound stream, oldest first."""
    return outboxes(redis_url, [group])[group]


def outboxes(redis_url: str, groups: Sequence[str]) -> dict[str, list[dict[str, str]]]:
    """Every item on each group's outbound stream, oldest first, read over one connection
    (a new client costs about a millisecond: a test polling many groups would mostly pay that)."""
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        pipe = client.pipeline(transaction=False)
        for group in groups:
            pipe.xrange(outbox_stream(group))
        streams = pipe.execute()
    read = zip(groups, streams, strict=True)
    return {group: [fields for _id, fields in items] for group, items in read}


def copy_prompts(tmp_path: Path) -> Path:
    """A private copy of the prompts folder (for tests that break a template)."""
    target = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", target)
    return target


ARCHITECT = AgentSpec(id="architect", name="Architect", role="architect", model="test-model")


def llm_request(text: str, *, at: datetime, tools: tuple[dict[str, Any], ...] = ()) -> LLMRequest:
    """A model request for the architect answering ``text`` in group demo."""
    trigger = ChatMessage(
        id="1-0", group="demo", sender="alex", kind=MessageKind.HUMAN, text=text, created_at=at
    )
    return LLMRequest(
        agent=ARCHITECT,
        trigger=trigger,
        model=ARCHITECT.model,
        system="You are the architect.",
        messages=({"role": "user", "content": text},),
        max_tokens=100,
        temperature=0.5,
        tools=tools,
    )


def zombies_of(pid: int) -> list[int]:
    """The children of ``pid`` that have ended and were not waited for."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z" and int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found
