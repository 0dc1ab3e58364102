"""The console's door: the token on every path (bearer or the login cookie), never in the query
string or the log; cross-site POSTs refused; security headers on every response; every body held
to its route's limit, chunked or not; no console beyond loopback without a token; a busy port is
one line."""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.errors import ConfigError, ServiceError
from orchestrator.settings import Settings
from orchestrator.web.api_agents import MAX_EDIT_BYTES
from orchestrator.web.api_lore import MAX_LORE_BODY_BYTES
from orchestrator.web.api_memory import MAX_PATCH_BYTES
from orchestrator.web.bodies import DEFAULT_BODY_BYTES
from orchestrator.web.listening import listen
from orchestrator.web.security import COOKIE, CSP
from tests.arena_helpers import set_team_environment, write_team
from tests.web_helpers import console_server, console_settings, own_redis

TOKEN = "t0ken-" + uuid.uuid4().hex
GUARDED = [
    "/",
    "/status",
    "/groups/demo",
    "/api/groups",
    "/api/groups/demo/messages",
    "/api/groups/demo/events",
    "/api/agents",
    "/api/status",
    "/api/route?text=hi",
    "/api/dead-letters",
    "/knowledge",
    "/api/knowledge/sources",
    "/metrics",
    "/docs",
    "/openapi.json",
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    folder = tmp_path_factory.mktemp("web-security")
    with own_redis(folder / "redis") as url:
        settings = console_settings(folder, url, web_token=TOKEN)
        with console_server(settings, keepalive_s=0.2) as base:
            yield base, settings


@pytest.fixture
def base(secured: tuple[str, Settings]) -> str:
    return secured[0]


def _headers_are_strict(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


@pytest.mark.parametrize("path", GUARDED)
def test_every_path_needs_the_token(base: str, path: str):
    """Without the token: 401 (a page asked for as HTML goes to the login page)."""
    with httpx.Client(base_url=base, timeout=5) as client:
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json() == {"error": "a token is needed (ARENA_WEB_TOKEN)"}
        assert response.headers["www-authenticate"] == "Bearer"
        _headers_are_strict(response)
        page = client.get(path, headers={"accept": "text/html"})
        if not path.startswith(("/api/", "/metrics", "/openapi.json")):
            assert page.status_code == 303
            assert page.headers["location"] == "/login"
        wrong = client.get(path, headers={"authorization": "Bearer " + TOKEN[:-1]})
        assert wrong.status_code == 401


@pytest.mark.parametrize("path", ["/api/groups", "/api/agents", "/metrics", "/docs"])
def test_the_bearer_token_opens_them(base: str, path: str):
    """With ``Authorization: Bearer``, the same paths answer, with the strict headers."""
    response = httpx.get(base + path, headers={"authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert response.status_code == 200, response.text
    _headers_are_strict(response)


def test_events_open_with_the_token(base: str):
    """The event stream needs the token too, and streams with it."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    with httpx.stream("GET", base + "/api/groups/demo/events", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        _headers_are_strict(response)


def test_the_token_is_not_taken_from_the_query_string(base: str):
    """``?token=`` (which access logs print) opens nothing."""
    for name in ("token", "access_token"):
        assert httpx.get(f"{base}/api/groups?{name}={TOKEN}", timeout=5).status_code == 401


def test_login_and_static_are_open_and_strict(base: str):
    """The login page and static files need no token and carry the headers."""
    page = httpx.get(base + "/login", timeout=5)
    assert page.status_code == 200
    assert 'name="token"' in page.text
    assert "<script>" not in page.text
    _headers_are_strict(page)
    css = httpx.get(base + "/static/console.css", timeout=5)
    assert css.status_code in (200, 404)
    _headers_are_strict(css)


def test_login_sets_a_strict_cookie_that_is_not_the_token(base: str):
    """A wrong token is 401; the right one a 303 with an HttpOnly, SameSite=Strict cookie
    derived from the token, which then opens the console."""
    with httpx.Client(base_url=base, timeout=5) as client:
        wrong = client.post("/login", data={"token": "nope"})
        assert wrong.status_code == 401
        assert "not the token" in wrong.text
        assert COOKIE not in client.cookies
        right = client.post("/login", data={"token": TOKEN})
        assert right.status_code == 303
        assert right.headers["location"] == "/"
        set_cookie = right.headers["set-cookie"]
        assert "HttpOnly" in set_cookie
        assert "SameSite=strict" in set_cookie or "SameSite=Strict" in set_cookie
        assert TOKEN not in set_cookie
        assert client.cookies[COOKIE]
        assert client.get("/api/groups").status_code == 200
        forged = httpx.get(base + "/api/groups", cookies={COOKIE: TOKEN}, timeout=5)
        assert forged.status_code == 401


def test_cross_site_posts_are_refused(base: str):
    """A POST that comes from another site is 403 however it is authenticated; a cookie
    POST must show it comes from the console itself."""
    path = f"/api/groups/room-{uuid.uuid4().hex[:8]}/messages"
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base, timeout=5) as client:
        client.post("/login", data={"token": TOKEN}, headers={"origin": base})
        for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"}):
            refused = client.post(path, json={"text": "hi"}, headers=headers)
            assert refused.status_code == 403, headers
            assert refused.json() == {"error": "cross-site request refused"}
            with_bearer = client.post(path, json={"text": "hi"}, headers={**bearer, **headers})
            assert with_bearer.status_code == 403
        assert client.post(path, json={"text": "hi"}).status_code == 403  # cookie, no origin
        same = client.post(path, json={"text": "hi"}, headers={"origin": base})
        assert same.status_code == 202
        fetch = client.post(path, json={"text": "hi"}, headers={"sec-fetch-site": "same-origin"})
        assert fetch.status_code == 202
    assert httpx.post(base + path, json={"text": "hi"}, headers=bearer).status_code == 202
    login = httpx.post(
        base + "/login", data={"token": TOKEN}, headers={"origin": "https://evil.example"}
    )
    assert login.status_code == 403


def test_the_token_never_reaches_the_log(base: str, caplog: pytest.LogCaptureFixture):
    """Requests with the token, at DEBUG, log no trace of it: access lines leave out the
    query string (where a mistaken ``?token=`` would be)."""
    caplog.set_level(logging.DEBUG)
    # The access lines' own level too: `arena` commands run earlier in this process keep
    # them at WARNING on the terminal.
    caplog.set_level(logging.DEBUG, logger="uvicorn.access")
    with httpx.Client(base_url=base, timeout=5) as client:
        client.get("/api/groups", headers={"authorization": f"Bearer {TOKEN}"})
        client.post("/login", data={"token": TOKEN})
        client.get(f"/api/groups?token={TOKEN}")
    ours = [r for r in caplog.records if r.name.startswith(("uvicorn", "orchestrator"))]
    assert any(r.name == "uvicorn.access" for r in ours)
    assert all(TOKEN not in r.getMessage() for r in ours)


_BEARER = {"Authorization": f"Bearer {TOKEN}"}
_LIMITED = [  # method, path, the route's limit, headers
    ("PUT", "/api/agents/ping/memory-md", MAX_EDIT_BYTES, _BEARER),
    ("PATCH", "/api/memories/1", MAX_PATCH_BYTES, _BEARER),
    ("PATCH", "/api/knowledge/lore/1", MAX_LORE_BODY_BYTES, _BEARER),
    ("POST", "/api/groups/demo/messages", 4 * 32 * 1024 + 4096, _BEARER),
    ("POST", "/login", DEFAULT_BODY_BYTES, {}),  # open to anyone
]


def _raw_request(base: str, head: list[str], chunks: list[bytes]) -> tuple[bytes, bytes]:
    """Send a request's head and ``chunks`` as they are over a socket, then read the answer
    until the console closes the connection: its head and its body."""
    url = httpx.URL(base)
    with socket.create_connection((url.host, url.port), timeout=5) as sock:
        sock.sendall("\r\n".join([*head, f"Host: {url.host}:{url.port}", "", ""]).encode())
        for chunk in chunks:
            sock.sendall(chunk)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    answer_head, _, body = answer.partition(b"\r\n\r\n")
    return answer_head, body


def _chunks(total: int, size: int = 16 * 1024) -> list[bytes]:
    """``total`` bytes of a chunked body, without its last (empty) chunk: the body never ends."""
    sizes = [size] * (total // size) + ([total % size] if total % size else [])
    return [b"%x\r\n%b\r\n" % (n, b"x" * n) for n in sizes]


@pytest.mark.parametrize(("method", "path", "limit", "headers"), _LIMITED)
def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(
    base: str, method: str, path: str, limit: int, headers: dict[str, str]
):
    """One byte over the route's limit, sent chunked and never finished: 413 at once, one
    line, and the connection closed; the route never had the whole body (it was never sent),
    and nothing was written."""
    head = [f"{method} {path} HTTP/1.1", "Transfer-Encoding: chunked"]
    head += ["Content-Type: application/json", *(f"{k}: {v}" for k, v in headers.items())]
    answer, body = _raw_request(base, head, _chunks(limit + 1))
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"connection: close" in answer.lower()
    reason = json.loads(body)["error"]
    assert f"the request is over {limit} bytes" in reason
    assert "\n" not in reason
    growth = httpx.get(f"{base}/api/agents/ping/growth", headers=_BEARER, timeout=5).json()
    assert growth["versions"] == []
    assert growth["attempts"] == []


@pytest.mark.parametrize(("method", "path", "limit", "headers"), _LIMITED)
def test_a_declared_length_over_the_limit_is_refused_before_the_body(
    base: str, method: str, path: str, limit: int, headers: dict[str, str]
):
    """A ``Content-Length`` one over the limit, and no body sent at all: 413 without waiting
    for it."""
    head = [f"{method} {path} HTTP/1.1", f"Content-Length: {limit + 1}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    answer, body = _raw_request(base, head, [])
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert json.loads(body)["error"].startswith(("text: ", "content: ", "body: ", "lore: "))
    assert f"the request is {limit + 1} bytes" in json.loads(body)["error"]


def test_a_refused_request_closes_without_reading_its_body(base: str):
    """Without the token, a chunked body not sent yet: 401 at once and the connection closed,
    without waiting for the body to drain it."""
    head = ["POST /api/groups/demo/messages HTTP/1.1", "Transfer-Encoding: chunked"]
    answer, body = _raw_request(base, head, [])
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert b"connection: close" in answer.lower()
    assert json.loads(body) == {"error": "a token is needed (ARENA_WEB_TOKEN)"}


def test_a_chunked_post_within_the_limit_is_posted(base: str):
    """A message sent chunked, and ended, is read whole and posted (202)."""
    text = json.dumps({"text": "y" * 30_000}).encode()
    head = ["POST /api/groups/demo/messages HTTP/1.1", "Transfer-Encoding: chunked"]
    head += [
        "Content-Type: application/json",
        "Connection: close",
        f"Authorization: Bearer {TOKEN}",
    ]
    chunks = [b"%x\r\n%b\r\n" % (len(part), part) for part in (text[:1000], text[1000:])]
    answer, body = _raw_request(base, head, [*chunks, b"0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 202 "), answer + body
    assert "id" in json.loads(body)


def test_without_a_token_only_loopback_names_are_answered(tmp_path: Path, embedded_redis_url):
    """No token: a request naming another host (DNS rebinding) is refused; POSTs from
    another site too."""
    settings = console_settings(tmp_path, embedded_redis_url)
    with console_server(settings) as base:
        assert httpx.get(base + "/api/groups", timeout=5).status_code == 200
        port = settings.web_port
        rebound = httpx.get(base + "/api/groups", headers={"host": f"evil.example:{port}"})
        assert rebound.status_code == 403
        assert httpx.get(base + "/login", timeout=5, follow_redirects=False).status_code == 303
        cross = httpx.post(
            base + "/api/groups/demo/messages",
            json={"text": "hi"},
            headers={"origin": "http://evil.example"},
        )
        assert cross.status_code == 403


def test_no_console_beyond_loopback_without_a_token(tmp_path: Path):
    """Listening on 0.0.0.0 without ARENA_WEB_TOKEN is refused, naming it."""
    settings = console_settings(tmp_path, "redis://127.0.0.1:1/0", web_host="0.0.0.0")
    with pytest.raises(ConfigError, match="ARENA_WEB_TOKEN"):
        listen(settings)
    listen(console_settings(tmp_path, "redis://127.0.0.1:1/0", web_host="::1")).close()


def test_a_busy_port_is_one_line_naming_the_setting(tmp_path: Path, free_port: int):
    """The port taken: one line naming ARENA_WEB_PORT."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port))
        taken.listen()
        settings = console_settings(tmp_path, "redis://127.0.0.1:1/0", web_port=free_port)
        with pytest.raises(ServiceError) as caught:
            listen(settings)
    assert str(caught.value) == (
        f"console: port {free_port} on 127.0.0.1 is already in use "
        "(set ARENA_WEB_PORT to another port, or 0 for no console)"
    )


_REFUSALS = [
    ({"ARENA_WEB_HOST": "0.0.0.0"}, "ARENA_WEB_TOKEN: the console would listen on 0.0.0.0"),
    ({"ARENA_WEB_PORT": "{busy}"}, "(set ARENA_WEB_PORT to another port, or 0 for no console)"),
]


@pytest.mark.parametrize(("extra", "wanted"), _REFUSALS)
def test_arena_web_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_port: int, extra, wanted
):
    """`arena web` beyond loopback without a token, or on a busy port: one line, exit 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port))
        taken.listen()
        env = {k: v.format(busy=free_port) for k, v in extra.items()}
        set_team_environment(tmp_path, monkeypatch, **env)
        result = CliRunner().invoke(main, ["web"])
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert wanted in result.stderr


@pytest.mark.parametrize(("extra", "wanted"), _REFUSALS)
def test_arena_up_refuses_in_one_line_before_starting_anything(
    tmp_path: Path, free_port: int, extra, wanted
):
    """`arena up` stops at once with one line, before Redis or anything starts (it runs in this
    process: it refuses before it starts anything that would outlive the call)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port))
        taken.listen()
        env = {
            "ARENA_DATA_DIR": str(tmp_path / "data"),
            "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
            "ARENA_WORKSPACES_DIR": str(tmp_path / "ws"),
            "ARENA_REDIS_PORT": "0",
            "ARENA_WORKERS": "0",
            "ARENA_DAEMONS": "1",
            **{k: v.format(busy=free_port) for k, v in extra.items()},
        }
        result = CliRunner().invoke(main, ["up"], env=env)
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert wanted in result.stderr
    assert not (tmp_path / "data" / "redis.sock").exists()


def test_arena_web_on_a_database_it_cannot_open_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_port: int, embedded_redis_url: str
):
    """`arena web` whose data folder does not exist: one line naming the database, exit 1,
    no server traceback."""
    set_team_environment(
        tmp_path,
        monkeypatch,
        ARENA_DATA_DIR=str(tmp_path / "no-such-folder"),
        ARENA_WEB_PORT=str(free_port),
        REDIS_URL=embedded_redis_url,
    )
    result = CliRunner().invoke(main, ["web"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("arena: database: cannot open sqlite:"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
