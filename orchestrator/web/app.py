"""The console's ASGI app: :func:`create_app` puts the pages, the JSON API, the events, the
metrics and the login form behind :class:`~orchestrator.web.security.SecurityMiddleware`, and
every request's body within its route's limit (:mod:`orchestrator.web.bodies`); ``HEAD`` is
answered as ``GET`` without the body.

The app opens what its handlers share (:class:`~orchestrator.web.state.Console`: the
database, the client, an async Redis and the approvals' decider) when it starts, and
closes them when it stops.
``/docs`` lists the API from its OpenAPI schema (``/openapi.json``) as a plain page: the
usual Swagger page runs inline and remote scripts, which the console's policy forbids.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment
from sqlalchemy.engine import Engine
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.adapters.outbox import OutboxReader
from orchestrator.adapters.redis_client import connect_async
from orchestrator.client import ArenaClient
from orchestrator.errors import OrchestratorError, ServiceError
from orchestrator.memory.db import make_engine
from orchestrator.runtime import approving
from orchestrator.runtime.approving import Approvals
from orchestrator.runtime.team import load_team
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings
from orchestrator.web import (
    api,
    api_agents,
    api_approvals,
    api_caps,
    api_context,
    api_knowledge,
    api_lore,
    api_memory,
    api_runs,
    api_summary,
    events,
    login,
    metrics,
    pages,
)
from orchestrator.web.bodies import BodyLimitMiddleware
from orchestrator.web.feeds import RoomFeeds
from orchestrator.web.rooms import Rooms
from orchestrator.web.security import Guard, SecurityMiddleware
from orchestrator.web.state import Console

__all__ = ["create_app"]

_BODY_EXPECTED = 'body: expected a JSON object such as {"text": "…", "sender": "…"}'

logger = logging.getLogger(__name__)

_DOCS = Environment(autoescape=True).from_string(
    """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{ title }} API</title>
<link rel="stylesheet" href="/static/console.css"></head><body><main class="docs">
<h1>{{ title }} API</h1><p>The schema: <a href="/openapi.json">/openapi.json</a> (OpenAPI
{{ version }}). Send the token as <code>Authorization: Bearer …</code> when one is set.</p>
<div class="scroll"><table class="list"><thead><tr><th>method</th><th>path</th><th>what</th></tr>
</thead><tbody>{% for method, path, summary in rows %}<tr><td>{{ method }}</td><td><code>{{ path
}}</code></td><td>{{ summary }}</td></tr>{% endfor %}</tbody></table></div></main></body></html>"""
)


def _console(
    settings: Settings, wiring: Wiring, approvals: Approvals, keepalive_s: float
) -> Console:
    """What the handlers share while the console runs: its clients over the wiring's
    database and Redis."""
    client = ArenaClient.from_settings(settings)
    # An event stream's XREAD blocks up to keepalive_s: the socket waits longer.
    redis = connect_async(
        settings.effective_redis_url, socket_timeout=keepalive_s + 10, socket_connect_timeout=5
    )
    agents = wiring.team.agents
    rooms = Rooms(wiring.history, agents, hop_limit=settings.hop_limit)
    feeds = RoomFeeds(OutboxReader(redis), events.renderer(rooms, agents), keepalive_s=keepalive_s)
    return Console(
        settings=settings,
        wiring=wiring,
        rooms=rooms,
        client=client,
        redis=redis,
        feeds=feeds,
        approvals=approvals,
        keepalive_s=keepalive_s,
    )


def create_app(
    settings: Settings, *, keepalive_s: float = 15.0, engine: Engine | None = None
) -> FastAPI:
    """The console for ``settings``' services; it opens them when it starts.

    Args:
        settings: where Redis and the database are, the agents, the token.
        keepalive_s: how long an idle event stream waits before a keep-alive comment.
        engine: the database, opened by the caller (who disposes of it); else the console
            opens it as it starts (a failure then is the server's, with its traceback).

    Raises:
        OrchestratorError: when the agent files are not valid.
    """
    team = load_team(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _database(engine) as database:
            wiring = Wiring(settings, database, team=team)
            # One decider for the app's life: its steps publisher keeps an MQTT connection.
            async with approving.opened(settings, wiring) as approvals:
                app.state.console = _console(settings, wiring, approvals, keepalive_s)
                try:
                    yield
                finally:
                    await app.state.console.feeds.close()
                    await app.state.console.redis.aclose()
                    app.state.console.client.close()

    @contextlib.asynccontextmanager
    async def _database(given: Engine | None) -> AsyncIterator[Engine]:
        if given is not None:
            yield given
            return
        opened = make_engine(settings.effective_database_url)
        try:
            yield opened
        finally:
            opened.dispose()

    app = FastAPI(
        title="Agent Arena",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.guard = Guard(settings.web_token)
    limits = (*api.body_limits(settings.max_message_bytes), *api_agents.BODY_LIMITS)
    limits = (*limits, *api_memory.BODY_LIMITS, *api_knowledge.BODY_LIMITS, *api_lore.BODY_LIMITS)
    app.add_middleware(BodyLimitMiddleware, limits=limits)
    # Added after, so outside: a refused request's body is never read, a 413 has the headers.
    app.add_middleware(SecurityMiddleware, guard=app.state.guard)
    app.add_middleware(_HeadAsGet)
    app.mount("/static", StaticFiles(directory=pages.STATIC_DIR), name="static")
    for module in (login, pages, metrics, api, events, api_memory, api_summary, api_agents):
        app.include_router(module.router)
    app.include_router(api_context.router)
    app.include_router(api_caps.router)
    app.include_router(api_runs.router)
    app.include_router(api_approvals.router)
    app.include_router(api_knowledge.router)
    app.include_router(api_lore.router)
    _errors(app)
    app.add_api_route(
        "/docs", _docs_page(app), include_in_schema=False, response_class=HTMLResponse
    )
    return app


class _HeadAsGet:
    """``HEAD`` answered as ``GET`` is, without the body: FastAPI's routes answer only the
    methods they name (a plain Starlette route adds HEAD to GET by itself)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def _docs_page(app: FastAPI) -> Any:
    def docs() -> HTMLResponse:
        schema = app.openapi()
        rows = [
            (method.upper(), path, operation.get("summary", ""))
            for path, operations in schema.get("paths", {}).items()
            for method, operation in operations.items()
        ]
        html = _DOCS.render(title=app.title, version=schema.get("openapi"), rows=rows)
        return HTMLResponse(html)

    return docs


def _errors(app: FastAPI) -> None:
    """Every error is ``{"error": "one line"}``."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        whole_body = first.get("loc", ()) == ("body",) or first.get("type") == "json_invalid"
        if whole_body:
            return JSONResponse({"error": _BODY_EXPECTED}, 422)
        return JSONResponse(
            {"error": f"{where or 'request'}: {first.get('msg', 'not valid')}"}, 422
        )

    @app.exception_handler(ServiceError)
    async def unavailable(request: Request, exc: ServiceError) -> JSONResponse:
        logger.warning("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"error": str(exc)}, 503)

    @app.exception_handler(OrchestratorError)
    async def refused(request: Request, exc: OrchestratorError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, 400)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        # Starlette raises it again after this answer: the server logs it, once.
        return JSONResponse({"error": "the console failed (see its log)"}, 500)
