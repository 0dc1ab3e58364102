"""``/openapi.json`` documents every answer of the console: each JSON route's success response
has a model's schema, every other route its media type, every error the ``{"error": …}``
body; and each GET route's real answer on a seeded console is an instance of its model."""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args

import httpx
import pytest
import redis
from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from sqlalchemy.engine import Engine

from orchestrator import web
from orchestrator.core.context.report import ContextReport, RecalledSnippet, RecallReport
from orchestrator.core.models import MessageKind, RouteDecision, RouteReason, Usage
from orchestrator.core.wire import deadletter_stream, spend_key
from orchestrator.memory.approvals import ApprovalStore
from orchestrator.memory.conversation.marker_entries import Rejected, Saved, StoredMarker
from orchestrator.memory.conversation.meta import (
    MarkerMeta,
    ReplyMeta,
    ToolCallMeta,
    ToolsMeta,
    TurnMeta,
)
from orchestrator.memory.conversation.store import Closing, NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.memory.session.store import Citation, NewMemory, SessionMemory
from orchestrator.memory.summaries import summary_path
from orchestrator.memory.versions.store import VersionStore
from orchestrator.settings import Settings
from orchestrator.web.app import create_app
from tests.approvals_seed import ask
from tests.runs_seed import seed_runs
from tests.web_helpers import chat_message, console_server, console_settings, own_redis, store

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
COMPONENTS = "#/components/schemas/"
SUCCESS = ("200", "201", "202")


@dataclass(frozen=True, slots=True)
class Seeded:
    """A console with something behind every route, and the ids to ask for."""

    base: str
    settings: Settings
    group: str
    reply: str
    memory: int
    run: str
    approval: str
    locator: str


def _seed_room(engine: Engine, group: str) -> str:
    """A person's message routed by a rule and two replies (one that called a memory tool,
    with its context and recall reports); the first reply's id."""
    human = chat_message(group, f"{group}-1", "alex", "let us play a game")
    ping = chat_message(
        group, f"{human.id}:1:ping", "ping", "@pong **your** turn", minutes=1,
        kind=MessageKind.AGENT, in_reply_to=human.id, hop=1,
    )  # fmt: skip
    pong = chat_message(
        group, f"{human.id}:2:pong", "pong", "done", minutes=2,
        kind=MessageKind.AGENT, in_reply_to=human.id, hop=2,
    )  # fmt: skip
    usage = Usage(input_tokens=100, output_tokens=20, cache_read_tokens=300)
    ping_meta = ReplyMeta(
        agent="ping",
        trigger=human.id,
        recall=RecallReport(
            snippets=(RecalledSnippet(id=1, score=0.5, trust="sourced"),), dropped=()
        ),
        context=ContextReport.from_json(
            {"window": 200000, "tokens": {"identity": 120, "history": 40, "total": 160}}
        ),
        turn=TurnMeta(
            provider="anthropic",
            model="claude-test",
            latency_ms=812.5,
            stop_reason="end_turn",
            usage=usage,
        ),
        markers=MarkerMeta(
            markers=(
                StoredMarker(kind="memory", payload={"type": "decision", "content": "chess"}),
            ),
            saved=(Saved(kind="memory", action="added", id=1, type="decision"),),
            rejected=(Rejected(kind="memory", reason="secret", detail="an API key"),),
        ),
        tools=ToolsMeta(
            calls=(
                ToolCallMeta(
                    name="memory_search",
                    input_chars=9,
                    result_chars=80,
                    is_error=False,
                    line='memory_search("game") → 1 hit',
                ),
            ),
            steps=(usage, usage),
        ),
    )
    rows = [
        NewReply(message=human, status="received"),
        NewReply(message=ping, meta=ping_meta.as_json()),
        NewReply(message=pong, meta=ReplyMeta(agent="pong", trigger=ping.id).as_json()),
    ]
    decision = RouteDecision(
        agents=("ping",), reason=RouteReason.RULE, rule="game", keywords_hit=("game",)
    )
    store(engine, rows, Closing(message_id=human.id, status="done", route=decision.as_dict()))
    return ping.id


def _seed_memory(engine: Engine, group: str, cited: str) -> int:
    """Two memories of the group, one citing a message; the cited one's id."""
    session = SessionMemory(engine)
    found = []
    for content, cites in (
        ("The deploy pipeline runs on GitHub Actions", cited),
        ("Deploy notes are kept in the wiki", None),
    ):
        written = session.write(
            NewMemory(
                scope="session",
                scope_id=group,
                type="decision",
                content=content,
                now=T0,
                agent="ping",
                group_id=group,
                source_message_id=cites,
                citation=Citation(kind="message", ref=cites, scope="session") if cites else None,
            )
        )
        found.append(written.record.id)
    return found[0]


def _seed_files(settings: Settings, engine: Engine, group: str, api: httpx.Client) -> None:
    """A summary with two versions, two hand edits of ping's MEMORY.md (and one refused as
    late), a line of its daily log, a dead letter and today's spending."""
    versions = VersionStore(engine)
    for text in ("Alex wants chess.\n", "Alex wants chess.\nPing plays white.\n"):
        versions.add("summary", group, text, trigger="idle", created_at=T0, tokens=5)
    path = summary_path(settings.data_dir, group)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Alex wants chess.\nPing plays white.\n")
    for text, base in (("- Serve fast\n", 0), ("- Serve fast\n- Aim low\n", 1), ("- x\n", 0)):
        api.put("/api/agents/ping/memory-md", json={"text": text, "base_version": base})
    PersonalLog(settings.workspaces_dir, settings.zone).append(
        "ping", PersonalDraft(content="Ask for the load first", type="lesson"),
        source=f"{group}/1-0", now=T0,
    )  # fmt: skip
    today = datetime.now(settings.zone).date().isoformat()
    with redis.Redis.from_url(settings.effective_redis_url) as r:
        fields = {"entry_id": "1-1", "reason": "model failed", "field:group": group}
        r.xadd(deadletter_stream(), {**fields, "field:text": "again", "field:sender": "alex"})
        r.hset(spend_key(today), mapping={f"tokens:group:{group}": 1500, "tokens:all:*": 1500})


def _seed_knowledge(api: httpx.Client, group: str) -> str:
    """A document uploaded for the group (a source of its own, indexed) and two lorebook
    entries (keys, pattern); a chunk's locator."""
    text = b"# Deploys\n\nThe deploy pipeline runs on GitHub Actions.\n"
    uploaded = api.post(
        "/api/knowledge/uploads",
        files=[("files", ("deploys.md", text, "text/markdown"))],
        data={"group": group},
    )
    assert uploaded.status_code == 201, uploaded.text
    for lore in (
        {"text": "Deploys freeze on Fridays.", "keys": ["deploy"], "group": group},
        {"text": "Ping answers pong.", "pattern": "p[io]ng", "agent": "ping"},
    ):
        added = api.post("/api/knowledge/lore", json=lore)
        assert added.status_code == 201, added.text
    found = api.get("/api/knowledge/search", params={"q": "deploy pipeline", "group": group})
    locator: str = found.json()["hits"][0]["locator"]
    return locator


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    folder = tmp_path_factory.mktemp("web-openapi")
    group = f"room-{uuid.uuid4().hex[:10]}"
    with own_redis(folder / "redis") as url:
        settings = console_settings(folder, url, cap_group_tokens_per_day=2000)
        engine = make_engine(settings.effective_database_url)
        with console_server(settings) as base, httpx.Client(base_url=base, timeout=20) as api:
            reply = _seed_room(engine, group)
            memory = _seed_memory(engine, group, cited=f"{group}-1")
            _seed_files(settings, engine, group, api)
            run = seed_runs(engine, group).done
            approval = ask(engine, group, pattern="Bash(rm -rf build)").id
            ApprovalStore(engine).decide(
                approval, approve=True, by="user", note="once", always=True, now=T0
            )
            locator = _seed_knowledge(api, group)
            yield Seeded(base, settings, group, reply, memory, run, approval, locator)
        engine.dispose()


@pytest.fixture
def schema(seeded: Seeded) -> dict[str, Any]:
    with httpx.Client(base_url=seeded.base, timeout=20) as api:
        response = api.get("/openapi.json")
    assert response.status_code == 200
    found: dict[str, Any] = response.json()
    return found


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            yield method.upper(), path, operation


def _success(operation: dict[str, Any]) -> dict[str, Any]:
    return next(operation["responses"][c] for c in SUCCESS if c in operation["responses"])


def _refs(schema: dict[str, Any]) -> list[str]:
    """The components a response's schema names: itself a ``$ref``, or ``anyOf`` them."""
    names = [o.get("$ref", "") for o in schema.get("anyOf", [schema])]
    return [n.removeprefix(COMPONENTS) for n in names] if all(names) else []


def test_every_route_documents_its_success_response(schema: dict[str, Any]):
    """A JSON answer's schema is a model with properties; any other names its media type."""
    components = schema["components"]["schemas"]
    problems = []
    for method, path, operation in _operations(schema):
        content = _success(operation).get("content", {})
        if not content:
            problems.append(f"{method} {path}: no media type")
        elif "application/json" in content:
            refs = _refs(content["application/json"].get("schema", {}))
            if not refs or not all(components[r].get("properties") for r in refs):
                problems.append(f"{method} {path}: no model: {content['application/json']}")
        elif not all(media.get("schema") for media in content.values()):
            problems.append(f"{method} {path}: {sorted(content)} without a schema")
    assert problems == []


def test_every_documented_error_is_the_one_line_error_body(schema: dict[str, Any]):
    """4xx and 5xx answers are documented as ``{"error": "one line"}``, as they are sent."""
    components = schema["components"]["schemas"]
    problems = []
    for method, path, operation in _operations(schema):
        for code, response in operation["responses"].items():
            if code in SUCCESS:
                continue
            refs = _refs(response.get("content", {}).get("application/json", {}).get("schema", {}))
            if len(refs) != 1 or set(components[refs[0]].get("properties", {})) != {"error"}:
                problems.append(f"{method} {path} {code}: {response}")
    assert problems == []


def _routes(app: FastAPI) -> list[APIRoute]:
    """The app's own routes and those of every router of the console's modules."""
    found = [r for r in app.routes if isinstance(r, APIRoute)]
    for module in pkgutil.iter_modules(web.__path__):
        router = getattr(importlib.import_module(f"{web.__name__}.{module.name}"), "router", None)
        if isinstance(router, APIRouter):
            found += [r for r in router.routes if isinstance(r, APIRoute)]
    return found


def test_routes_left_out_of_the_schema_declare_what_they_send(seeded: Seeded):
    """Pages, redirects, the docs page and /metrics each declare a non-JSON response class."""
    undeclared = [
        f"{sorted(route.methods)} {route.path}"
        for route in _routes(create_app(seeded.settings))
        if not route.include_in_schema
        and not (
            isinstance(route.response_class, type)
            and issubclass(route.response_class, Response)
            and not issubclass(route.response_class, JSONResponse)
        )
    ]
    assert undeclared == []


def _calls(seeded: Seeded) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """How to ask each GET route of the API, on the seeded console."""
    g, agent = seeded.group, "/api/agents/ping"
    return {
        "/api/groups": [("/api/groups", {})],
        "/api/groups/{group}/messages": [(f"/api/groups/{g}/messages", {"limit": "2"})],
        "/api/route": [("/api/route", {"text": "let us play a game"})],
        "/api/status": [("/api/status", {})],
        "/api/dead-letters": [("/api/dead-letters", {})],
        "/api/agents": [("/api/agents", {})],
        "/api/agents/{agent_id}": [(agent, {})],
        "/api/agents/{agent_id}/growth": [(f"{agent}/growth", {})],
        "/api/agents/{agent_id}/growth/{version}": [(f"{agent}/growth/2", {})],
        "/api/agents/{agent_id}/logs": [(f"{agent}/logs", {"date": "2026-01-05"})],
        "/api/memories": [
            ("/api/memories", {"group": g}),
            ("/api/memories", {"q": "deploy pipeline github actions", "group": g}),
        ],
        "/api/memories/{entry_id}": [(f"/api/memories/{seeded.memory}", {})],
        "/api/groups/{group}/summary": [
            (f"/api/groups/{g}/summary", {}),
            (f"/api/groups/{g}/summary", {"version": "2"}),
        ],
        "/api/context": [("/api/context", {"agent": "ping", "group": g, "message": "hi"})],
        "/api/messages/{message_id}/report": [(f"/api/messages/{seeded.reply}/report", {})],
        "/api/budget": [("/api/budget", {})],
        "/api/runs": [("/api/runs", {}), ("/api/runs", {"group": g, "limit": "2"})],
        "/api/runs/{run_id}": [(f"/api/runs/{seeded.run}", {})],
        "/api/approvals": [("/api/approvals", {}), ("/api/approvals", {"state": "all"})],
        "/api/approvals/{approval_id}": [(f"/api/approvals/{seeded.approval}", {})],
        "/api/allow": [("/api/allow", {}), ("/api/allow", {"agent": "ping"})],
        "/api/knowledge/sources": [("/api/knowledge/sources", {})],
        "/api/knowledge/sources/{name}/chunks": [
            (f"/api/knowledge/sources/uploads-{g}/chunks", {}),
            (f"/api/knowledge/sources/uploads-{g}/chunks", {"path": "deploys.md", "limit": "1"}),
        ],
        "/api/knowledge/locate": [("/api/knowledge/locate", {"locator": seeded.locator})],
        "/api/knowledge/search": [
            ("/api/knowledge/search", {"q": "deploy pipeline"}),
            ("/api/knowledge/search", {"q": "deploy pipeline", "group": g, "agent": "ping"}),
        ],
        "/api/knowledge/lore": [("/api/knowledge/lore", {})],
    }


def _models(route: APIRoute) -> tuple[Any, ...]:
    return get_args(route.response_model) or (route.response_model,)


def test_each_get_route_answers_with_its_documented_model(seeded: Seeded, schema: dict[str, Any]):
    """Each GET route's real answer is an instance of the model its schema names, no key
    more or less (dumped again, the model gives the same JSON)."""
    routes = {
        (method, r.path): r for r in _routes(create_app(seeded.settings)) for method in r.methods
    }
    calls = _calls(seeded)
    checked = []
    with httpx.Client(base_url=seeded.base, timeout=20) as api:
        for method, path, operation in _operations(schema):
            json_body = _success(operation).get("content", {}).get("application/json")
            if method != "GET" or json_body is None:
                continue
            assert path in calls, f"no call of GET {path} here: add one"
            route = routes[method, path]
            assert _refs(json_body["schema"]) == [m.__name__ for m in _models(route)], path
            adapter = TypeAdapter(route.response_model)
            for url, params in calls[path]:
                response = api.get(url, params=params)
                assert response.status_code == 200, (url, params, response.text)
                body = response.json()
                value = adapter.validate_python(body)
                assert adapter.dump_python(value, mode="json", by_alias=True) == body, url
                checked.append(url)
    assert len(checked) == sum(len(c) for c in calls.values())
