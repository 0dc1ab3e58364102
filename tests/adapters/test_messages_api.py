"""Tests for orchestrator.adapters.messages_api: the local Messages API, over HTTP, through
Anthropic's SDK and through the real ``claude`` CLI that claude-agent-sdk bundles."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import logging
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.messages_api import MessagesApiServer
from orchestrator.offline.coder import Text, ToolUse, Turn

WRITE = ToolUse(id="toolu_1", name="Write", input={"file_path": "/p/a.py", "content": "x = 1\n"})
SCRIPTED = Turn(content=(Text(text="I will write the file now."), WRITE), stop_reason="tool_use")
BODY = {
    "model": "claude-x",
    "max_tokens": 100,
    "system": "be brief",
    "messages": [{"role": "user", "content": "write a.py please"}],
}


def scripted(request: Mapping[str, Any]) -> Turn:
    return SCRIPTED


@pytest.fixture
def server() -> Iterator[MessagesApiServer]:
    """A server whose responder always answers SCRIPTED."""
    with MessagesApiServer(scripted) as srv:
        yield srv


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def post(server: MessagesApiServer, path: str, body: Any) -> Reply:
    """POST ``body`` (JSON, or raw bytes) on a connection of its own, read to the end."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with contextlib.closing(connect(server)) as connection:
        connection.request("POST", path, body=raw, headers={"content-type": "application/json"})
        response = connection.getresponse()
        return Reply(
            status=response.status, headers=dict(response.getheaders()), body=response.read()
        )


def connect(server: MessagesApiServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)


def sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a server-sent event stream."""
    events = []
    for chunk in raw.decode().split("\n\n"):
        if chunk.strip():
            fields = dict(line.split(": ", 1) for line in chunk.splitlines())
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_a_stream_is_the_messages_apis_event_sequence(server: MessagesApiServer):
    """stream: true gets message_start, ping, each block's start/deltas/stop, delta, stop."""
    response = post(server, "/v1/messages?beta=true", {**BODY, "stream": True})
    assert response.status == 200
    assert response.headers["content-type"] == "text/event-stream"
    events = sse(response.body)
    names = [name for name, _ in events]
    assert all(data["type"] == name for name, data in events)
    text_deltas = [d["delta"] for n, d in events if n == "content_block_delta" and d["index"] == 0]
    json_deltas = [d["delta"] for n, d in events if n == "content_block_delta" and d["index"] == 1]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        *["content_block_delta"] * len(text_deltas),
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * len(json_deltas),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert len(text_deltas) > 1  # delivered in pieces
    assert len(json_deltas) > 1
    assert "".join(d["text"] for d in text_deltas) == "I will write the file now."
    assert {d["type"] for d in json_deltas} == {"input_json_delta"}
    assert json.loads("".join(d["partial_json"] for d in json_deltas)) == WRITE.input
    started = events[0][1]["message"]
    assert started["model"] == "claude-x"
    assert started["usage"]["input_tokens"] == 5  # "be brief" + "write a.py please"
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"]["output_tokens"] == 6 + 6  # words: the text, the input as JSON


def test_anthropics_sdk_reads_the_stream_and_the_json_answer(server: MessagesApiServer):
    """The real SDK rebuilds the same message from the stream as from the JSON body."""
    from anthropic import Anthropic  # the model SDK, imported by the test that needs it

    client = Anthropic(api_key="test", base_url=server.base_url, max_retries=0)
    with client.messages.stream(**BODY) as stream:
        streamed = stream.get_final_message()
    answered = client.messages.create(**BODY)
    for message in (streamed, answered):
        assert message.model == "claude-x"
        assert message.stop_reason == "tool_use"
        assert [block.type for block in message.content] == ["text", "tool_use"]
        call = message.content[1]
        assert (call.id, call.name, call.input) == ("toolu_1", "Write", dict(WRITE.input))
        assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 12)


def test_one_connection_carries_a_stream_then_a_json_answer(server: MessagesApiServer):
    """Keep-alive: the chunked stream ends cleanly, so the next request on it is answered."""
    with contextlib.closing(connect(server)) as connection:
        for stream in (True, False):
            connection.request("POST", "/v1/messages", body=json.dumps({**BODY, "stream": stream}))
            response = connection.getresponse()
            assert response.status == 200
            response.read()
    assert [a.body["stream"] for a in server.requests if a.body] == [True, False]


def test_what_else_the_cli_may_ask_is_answered(server: MessagesApiServer):
    """count_tokens counts, HEAD (a connectivity check) is 200, anything else a 404 error."""
    counted = post(server, "/v1/messages/count_tokens?beta=true", BODY)
    assert json.loads(counted.body) == {"input_tokens": 5}
    with contextlib.closing(connect(server)) as connection:
        connection.request("HEAD", "/api/hello")
        hello = connection.getresponse()
        assert (hello.status, hello.read()) == (200, b"")
        connection.request("GET", "/v1/models")
        missing = connection.getresponse()
        assert missing.status == 404
        assert json.loads(missing.read())["error"]["type"] == "not_found_error"
    assert [(a.method, a.path, a.status) for a in server.requests] == [
        ("POST", "/v1/messages/count_tokens?beta=true", 200),
        ("HEAD", "/api/hello", 200),
        ("GET", "/v1/models", 404),
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        ({"model": "claude-x", "max_tokens": 1}, "messages"),
        ({"max_tokens": 1, "messages": []}, "model"),
    ],
)
def test_a_bad_body_gets_a_400_error(server: MessagesApiServer, body: Any, message: str):
    """A body that is not a request gets the API's invalid_request_error, not an answer."""
    response = post(server, "/v1/messages", body)
    assert response.status == 400
    error = json.loads(response.body)["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]


def test_a_failing_responder_gets_a_500_not_to_be_retried(caplog: pytest.LogCaptureFixture):
    """A responder that raises answers 500 with x-should-retry: false, and is logged once."""

    def broken(request: Mapping[str, Any]) -> Turn:
        raise RuntimeError("no answer")

    with MessagesApiServer(broken) as srv:
        response = post(srv, "/v1/messages", BODY)
    assert response.status == 500
    assert response.headers["x-should-retry"] == "false"
    assert "no answer" in json.loads(response.body)["error"]["message"]
    errors = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == ["the Messages API responder failed"]


def test_the_server_takes_a_given_port_and_frees_it_on_close():
    """A given port is used; after close() nothing listens there and it can start again."""
    with MessagesApiServer(scripted) as first:
        port = first.port
    assert first.base_url == f"http://127.0.0.1:{port}"
    with pytest.raises(ConnectionRefusedError):
        post(first, "/v1/messages", BODY)
    with MessagesApiServer(scripted, port=port) as again:
        assert post(again, "/v1/messages", BODY).status == 200


# --- the real claude CLI -----------------------------------------------------------------


def _bundled_cli() -> Path | None:
    """The claude CLI that claude-agent-sdk ships, found without importing the SDK."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        return None
    cli = Path(spec.origin).parent / "_bundled" / "claude"
    return cli if cli.is_file() else None


CLI = _bundled_cli()
needs_cli = pytest.mark.skipif(
    CLI is None, reason="claude-agent-sdk is not installed: these tests run its bundled claude CLI"
)


@dataclass(frozen=True)
class Dirs:
    workspace: Path
    project: Path
    home: Path


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    """A personal workspace (the CLI's cwd), a git project beside it, a throwaway home."""
    found = Dirs(workspace=tmp_path / "ws", project=tmp_path / "shared", home=tmp_path / "home")
    for folder in (found.workspace, found.project, found.home / "config", found.home / "tmp"):
        folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(found.project)], check=True)
    return found


def run_claude(
    server: MessagesApiServer, dirs: Dirs, request: str
) -> tuple[int, list[dict[str, Any]]]:
    """``claude -p`` asked "Project: <project>\\n<request>", as the arena asks it, offline."""
    assert CLI is not None
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(dirs.home),
        "CLAUDE_CONFIG_DIR": str(dirs.home / "config"),
        "CLAUDE_CODE_TMPDIR": str(dirs.home / "tmp"),
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "offline",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    command = [
        str(CLI),
        "-p",
        f"Project: {dirs.project}\n{request}",
        *("--output-format", "stream-json", "--verbose"),
        *("--add-dir", str(dirs.project), "--permission-mode", "acceptEdits"),
        *("--allowedTools", "Write,Bash,Read"),
    ]
    child = subprocess.Popen(
        command,
        cwd=dirs.workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = child.communicate(timeout=50)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, 9)
            child.wait()
    assert _left_in_session(child.pid) == []
    return child.returncode, [json.loads(line) for line in out.splitlines() if line.strip()]


def _left_in_session(session: int) -> list[int]:
    """Processes still alive (not zombies) in the session the CLI led."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while we looked
        if int(fields[3]) == session and fields[0] != "Z":
            left.append(int(stat.parent.name))
    return left


def tool_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block
        for event in events
        if event["type"] == "assistant"
        for block in event["message"]["content"]
        if block["type"] == "tool_use"
    ]


@needs_cli
def test_the_claude_cli_creates_a_file_in_the_project_then_runs_it(dirs: Dirs):
    """Offline, the real CLI writes hello.py into the project, then runs it and says hello."""
    with MessagesApiServer() as server:
        code, events = run_claude(server, dirs, "@developer create hello.py that prints hello")
        assert code == 0
        assert (dirs.project / "hello.py").read_text() == 'print("hello")\n'
        result = events[-1]
        assert result["type"] == "result"
        assert result["is_error"] is False
        assert result["result"] == "Created hello.py: it prints hello."
        assert result["usage"]["input_tokens"] > 0
        assert result["usage"]["output_tokens"] > 0
        [write] = tool_calls(events)
        last = server.requests[-1].body
        assert last is not None
        returned = [
            block
            for message in last["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        assert [block["tool_use_id"] for block in returned] == [write["id"]]

        code, events = run_claude(server, dirs, "check hello.py")
        assert code == 0
        [bash] = tool_calls(events)
        assert bash["name"] == "Bash"
        assert events[-1]["result"].endswith("exit code 0, output:\nhello")
    assert {(a.method, a.status) for a in server.requests} == {("POST", 200)}


@needs_cli
def test_the_claude_cli_gives_up_at_once_when_the_responder_fails(dirs: Dirs):
    """A 500 that says not to retry ends the run after one request, with an error result."""

    def broken(request: Mapping[str, Any]) -> Turn:
        raise RuntimeError("no answer")

    with MessagesApiServer(broken) as server:
        code, events = run_claude(server, dirs, "check hello.py")
    assert code != 0
    assert events[-1]["type"] == "result"
    assert events[-1]["is_error"] is True
    assert len(server.requests) == 1
