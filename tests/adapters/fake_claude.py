"""A fake ``claude`` CLI for the tests of orchestrator.adapters.claude_code: the failures the
real CLI will not produce on demand (a stall, a crash, garbage, a stubborn grandchild, ...).

It speaks the CLI's stream-json protocol as claude-agent-sdk drives it, in the shapes the real
CLI writes: it answers the ``initialize`` control request, reads the prompt (one ``user`` line),
writes ``system``/``init``, then one JSON message a line, and plays one scenario. Every process
it starts, itself included, is written to ``pids`` beside its script (``kind pid`` a line), so
a test can tell they are gone. Standard library only: it starts before every fake run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["SCENARIOS", "STDERR_LINES", "main", "write_fake"]

SESSION = "5e55i0n-0000-4000-8000-000000000000"
STDERR_LINES = [f"trace {n}: at startRun (cli.js:{n})" for n in range(30)] + [
    "Error: the model endpoint refused the request"
]
BIG_RESULT_CHARS = 5 * 1024 * 1024  # several MB on one line: far past asyncio's 64 KiB


def write_fake(folder: Path, scenario: str) -> Path:
    """An executable ``claude`` in ``folder`` that plays ``scenario`` (see :data:`SCENARIOS`)."""
    repo = Path(__file__).resolve().parents[2]
    path = folder / "claude"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(repo)!r})\n"
        "from tests.adapters.fake_claude import main\n"
        f"main({scenario!r}, {str(folder)!r})\n",
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


class Fake:
    """One fake CLI process: its protocol, and the processes it starts."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.note("cli", os.getpid())

    def note(self, kind: str, pid: int) -> None:
        with (self.folder / "pids").open("a", encoding="ascii") as out:
            out.write(f"{kind} {pid}\n")

    def send(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def handshake(self) -> None:
        """Answer the SDK's ``initialize``, read the prompt, say ``init``."""
        request = json.loads(sys.stdin.readline())
        assert request["request"]["subtype"] == "initialize", request
        self.send(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": request["request_id"],
                    "response": {"commands": [], "models": [], "account": {}},
                },
            }
        )
        prompt = json.loads(sys.stdin.readline())
        assert prompt["type"] == "user", prompt
        self.send(
            {
                "type": "system",
                "subtype": "init",
                "cwd": os.getcwd(),
                "session_id": SESSION,
                "tools": ["Bash", "Read", "Write"],
                "mcp_servers": [],
                "model": "claude-test",
                "permissionMode": "dontAsk",
                "apiKeySource": "ANTHROPIC_API_KEY",
                "claude_code_version": "2.1.332",
                "uuid": "u-init",
            }
        )

    def assistant(self, message_id: str, block: dict[str, Any], tokens: tuple[int, int]) -> None:
        usage = {
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message: dict[str, Any] = {"id": message_id, "type": "message", "role": "assistant"}
        message |= {"model": "claude-test", "content": [block], "usage": usage}
        self.send(
            {
                "type": "assistant",
                "message": message,
                "parent_tool_use_id": None,
                "session_id": SESSION,
                "uuid": f"u-{message_id}-{block['type']}",
            }
        )

    def tool(self, message_id: str, tool_id: str, name: str, data: dict[str, Any]) -> None:
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": data}
        self.assistant(message_id, block, (100, 20))

    def text(self, message_id: str, text: str) -> None:
        self.assistant(message_id, {"type": "text", "text": text}, (150, 10))

    def tool_result(self, tool_id: str, content: str, is_error: bool = False) -> None:
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
        self.send(
            {
                "type": "user",
                "message": {"role": "user", "content": [block | {"is_error": is_error}]},
                "parent_tool_use_id": None,
                "session_id": SESSION,
                "uuid": f"u-{tool_id}-result",
            }
        )

    def result(self, text: str, denials: list[dict[str, Any]] | None = None) -> None:
        usage = {"input_tokens": 250, "output_tokens": 30}
        usage |= {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        self.send(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "duration_ms": 40,
                "duration_api_ms": 30,
                "num_turns": 2,
                "result": text,
                "stop_reason": "end_turn",
                "session_id": SESSION,
                "total_cost_usd": 0.0125,
                "usage": usage,
                "permission_denials": denials or [],
                "terminal_reason": "completed",
                "uuid": "u-result",
            }
        )

    def start(self, kind: str, command: list[str]) -> None:
        """A process of the run's own (a test server, a watcher), noted once it says ``ready``
        on its stdout (a line); what else it writes is its own."""
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        self.note(kind, child.pid)

    def leave_behind(self, kind: str, code: str) -> None:
        """What a Bash command leaves running: Claude Code runs each command in a session of its
        own, and a process the command started in the background outlives its shell. ``code``
        (Python) prints ``ready PID`` once it is set up."""
        shell = subprocess.Popen(
            ["sh", "-c", '"$0" -c "$1" &', sys.executable, code],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert shell.stdout is not None
        ready, pid = shell.stdout.readline().split()
        assert ready == b"ready"
        assert os.getsid(int(pid)) != os.getsid(0)  # out of the CLI's group and session
        shell.wait()
        self.note(kind, int(pid))

    def until_eof(self) -> None:
        """What the CLI does after its result: read stdin until the SDK closes it."""
        for _ in sys.stdin:
            pass

    def stuck(self) -> None:
        """Never write again, never read again (a CLI wedged on a hung tool)."""
        while True:
            time.sleep(60)


def normal(fake: Fake) -> None:
    fake.tool("msg_1", "toolu_1", "Bash", {"command": "pytest -q"})
    fake.tool_result("toolu_1", "3 passed")
    fake.text("msg_2", "All three tests pass.\nNothing else to do.")
    fake.result("All three tests pass.")
    fake.until_eof()


def stall(fake: Fake) -> None:
    fake.start("child", ["sh", "-c", "echo ready; exec sleep 300"])
    fake.tool("msg_1", "toolu_1", "Bash", {"command": "npm run dev"})
    fake.tool_result("toolu_1", "listening on :3000")
    fake.stuck()


def slow(fake: Fake) -> None:
    for n in range(1, 10_000):
        fake.text(f"msg_{n}", f"still working ({n})")
        time.sleep(0.1)


def crash(fake: Fake) -> None:
    fake.tool("msg_1", "toolu_1", "Read", {"file_path": "app.py"})
    for line in STDERR_LINES:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    sys.exit(1)


def garbage(fake: Fake) -> None:
    fake.tool("msg_1", "toolu_1", "Read", {"file_path": "app.py"})
    sys.stdout.write('{"type": "assistant", "message": {"content": [\x00 not json\n')
    sys.stdout.flush()
    fake.until_eof()


def misshapen(fake: Fake) -> None:
    fake.tool("msg_1", "toolu_1", "Read", {"file_path": "app.py"})
    fake.send({"type": "assistant", "message": {"id": "msg_2"}})  # JSON, not a message
    fake.until_eof()


def long_line(fake: Fake) -> None:
    fake.tool("msg_1", "toolu_1", "Read", {"file_path": "data.json"})
    fake.tool_result("toolu_1", "[" + "7," * (BIG_RESULT_CHARS // 2) + "7]")
    fake.text("msg_2", "The file holds one long list.")
    fake.result("The file holds one long list.")
    fake.until_eof()


def grandchild(fake: Fake) -> None:
    # Started by a tool's shell and left behind: it ignores SIGTERM, so only SIGKILL ends it.
    ignore = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(300)"
    )
    fake.start("stubborn", [sys.executable, "-c", ignore])
    fake.tool("msg_1", "toolu_1", "Bash", {"command": "python serve.py &"})
    fake.tool_result("toolu_1", "started")
    fake.result("Started the server.")
    fake.until_eof()


def orphan(fake: Fake) -> None:
    # A server a Bash command started and left behind, deaf to SIGTERM.
    code = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', os.getpid(), flush=True); time.sleep(300)"
    )
    fake.tool("msg_1", "toolu_1", "Bash", {"command": "python serve.py &"})
    fake.leave_behind("orphan", code)
    fake.tool_result("toolu_1", "started")
    fake.result("Started the server.")
    fake.until_eof()


def denied(fake: Fake) -> None:
    fake.tool("msg_1", "toolu_1", "WebFetch", {"url": "https://example.com"})
    fake.tool_result("toolu_1", "Permission to use WebFetch has been denied.", is_error=True)
    fake.text("msg_2", "I could not fetch the page, so I answered from memory.")
    denial = {"tool_name": "WebFetch", "tool_use_id": "toolu_1", "tool_input": {}}
    fake.result("Answered from memory.", denials=[denial])
    fake.until_eof()


def error_result(fake: Fake) -> None:
    # What the real CLI does when the model's API fails: an error result, then exit 1.
    api_error = "API Error: 500 the server failed. This is a server-side issue."
    fake.text("msg_1", api_error)
    fake.send(
        {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "duration_ms": 30,
            "duration_api_ms": 0,
            "num_turns": 1,
            "result": api_error,
            "stop_reason": "stop_sequence",
            "session_id": SESSION,
            "total_cost_usd": 0,
            "permission_denials": [],
            "terminal_reason": "api_error",
            "api_error_status": 500,
            "uuid": "u-result",
        }
    )
    sys.exit(1)


SCENARIOS: dict[str, Callable[[Fake], None]] = {
    f.__name__: f
    for f in (
        normal,
        stall,
        slow,
        crash,
        garbage,
        misshapen,
        long_line,
        grandchild,
        orphan,
        denied,
        error_result,
    )
}


def main(scenario: str, folder: str) -> None:
    """Play ``scenario``; the SDK's signals end it as they would the real CLI."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    fake = Fake(folder)
    fake.handshake()
    SCENARIOS[scenario](fake)
