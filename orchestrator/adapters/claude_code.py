"""One Claude Code run through the Claude Agent SDK: the coding CLI on the project, its steps
as they happen, and how it ended.

The CLI's working directory is the agent's personal workspace; the run's checkout of the shared
project is added to it (``--add-dir``). It runs under :mod:`orchestrator.adapters.process_group`,
so ending it ends everything it started, and sees only the environment built here: the model's
key and base URL, its own configuration folder (``CLAUDE_CONFIG_DIR``, also its ``HOME``) and
switches that keep it offline and quiet, never the arena's own settings. No settings file is
read (``setting_sources=[]``): the agent's knowledge is the arena's context, appended to Claude
Code's system prompt, its automatic memory off (``CLAUDE_CODE_DISABLE_AUTO_MEMORY=1``), and the
arena's read-only tools served in process (:mod:`orchestrator.adapters.claude_tools`).

A run ends ``done``, or ``failed`` (the CLI said so, or it was denied a tool even if it then
succeeded; a denial by its gate, the person's decision, is not a failure), ``cancelled``,
``stalled`` (no event for ``code.inactivity_s``), ``timed_out`` (past ``code.wall_s``) or
``crashed`` (the CLI died or wrote what is not its protocol); or it stops ``waiting`` (the gate
waited for a decision in vain: the CLI ended its turn, its session can be resumed). Unless
the CLI ended by itself, its group is stopped here first (SIGTERM to the launcher), before the
SDK closes its side. The tokens are summed from the model calls as they stream in, so a run
stopped half-way is still charged for what it used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import claude_agent_sdk as sdk

from orchestrator.adapters.claude_paths import PathGuard
from orchestrator.adapters.claude_permits import (
    READ_TOOLS,
    Gate,
    denied_tool,
    failure,
    first_line,
    permission_callback,
    text_of,
    usage_of,
)
from orchestrator.adapters.claude_tools import ExtraTool, allowed_names, mcp_servers
from orchestrator.adapters.process_group import GRACE_S, PIDFILE_ENV, wait_ended
from orchestrator.core.coding import describe_tool
from orchestrator.core.models import CodeSpec, Usage
from orchestrator.errors import ServiceError
from orchestrator.files import write_atomic

__all__ = ["ClaudeCode", "RunOutcome", "RunRequest", "RunStatus", "RunStep", "bundled_cli"]

logger = logging.getLogger(__name__)

RunStatus = Literal["done", "failed", "cancelled", "stalled", "timed_out", "crashed", "waiting"]
# What the CLI is given of the environment (see the module docstring).
_ENV_NAMES = (
    "PATH",
    "HOME",
    "LANG",
    "CLAUDE_CONFIG_DIR",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "DISABLE_ERROR_REPORTING",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
    "CLAUDE_CODE_TMPDIR",
    "TMPDIR",
)
_MAX_LINE_BYTES = 16 * 1024 * 1024  # a tool's result may be large; never asyncio's 64 KiB
_STDERR_LINES = 10  # the last lines of the CLI's stderr, quoted when it crashes


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """What one run is given."""

    prompt: str
    system: str  # appended to Claude Code's own system prompt
    workspace: Path  # the agent's personal workspace: the working directory
    project: Path  # the run's checkout of the shared project: added to it
    config_dir: Path  # the agent's own CLI configuration folder
    model: str
    code: CodeSpec
    api_key: str
    base_url: str | None = None
    max_budget_usd: float | None = None
    gate: Gate | None = None  # asks for each edit and command (approvals); None: allowed
    resume: str | None = None  # the CLI session to go on with (a run woken by a decision)
    steps_before: int = 0  # the steps it made before it was woken
    tools: Sequence[ExtraTool] = ()  # the arena's own tools it may call (read-only)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStep:
    """One thing a run did, as a line on its card: a tool called, its result, or text."""

    n: int
    kind: Literal["tool", "result", "text", "approval"]
    line: str
    tool: str | None = None
    is_error: bool = False
    approval: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome:
    """How a run ended."""

    status: RunStatus
    text: str
    turns: int
    duration_ms: int
    usage: Usage
    cost_usd: float | None = None
    denials: tuple[str, ...] = ()
    problem: str | None = None
    session_id: str | None = None


OnStep = Callable[[RunStep], Awaitable[None]]


def bundled_cli() -> Path | None:
    """The ``claude`` executable the SDK ships with, else one on ``PATH``."""
    bundled = Path(sdk.__file__).parent / "_bundled" / "claude"
    if bundled.is_file():
        return bundled
    found = shutil.which("claude")
    return Path(found) if found else None


class ClaudeCode:
    """Runs Claude Code; ``launcher_dir`` holds the script that starts it in its own group."""

    def __init__(self, launcher_dir: Path, cli: Path | None = None) -> None:
        found = cli or bundled_cli()
        if found is None:
            raise ServiceError(
                "claude-code", "the claude CLI is not installed", "reinstall: make .venv"
            )
        self.cli = found
        self.launcher = launcher_dir / "claude-in-group"
        script = (
            "#!/bin/sh\n"
            f"exec {shlex.quote(sys.executable)} -m orchestrator.adapters.process_group "
            f'--env={",".join(_ENV_NAMES)} {shlex.quote(str(found))} "$@"\n'
        )
        if not self.launcher.is_file() or self.launcher.read_text(encoding="utf-8") != script:
            write_atomic(self.launcher, script)
        self.launcher.chmod(0o700)

    async def run(
        self, request: RunRequest, on_step: OnStep, cancel: asyncio.Event | None = None
    ) -> RunOutcome:
        """Run the CLI on ``request`` until it ends, is cancelled or goes past a limit."""
        pidfile = request.config_dir / "run.pid"
        pidfile.unlink(missing_ok=True)
        run = _Run(request, on_step)
        stream = sdk.query(prompt=request.prompt, options=self._options(request, run, pidfile))
        try:
            run.status = await _follow(stream, run, request.code, cancel, lambda: _stop(pidfile))
        finally:
            closing = getattr(stream, "aclose", None)  # an async generator: close it now
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()
            await asyncio.to_thread(_launcher_ended, pidfile)
        return run.outcome()

    def _options(self, request: RunRequest, run: _Run, pidfile: Path) -> sdk.ClaudeAgentOptions:
        code = request.code
        (request.config_dir / "tmp").mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(request.config_dir),
            "LANG": "C.UTF-8",
            "CLAUDE_CONFIG_DIR": str(request.config_dir),
            "ANTHROPIC_API_KEY": request.api_key,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
            "CLAUDE_CODE_TMPDIR": str(request.config_dir / "tmp"),  # not /tmp/claude-<uid>
            "TMPDIR": str(request.config_dir / "tmp"),  # a command's scratch files, too
            PIDFILE_ENV: str(pidfile),  # read by the launcher, not passed on
            **({"ANTHROPIC_BASE_URL": request.base_url} if request.base_url else {}),
        }
        gate, allowed, mode = request.gate, list(code.tools), code.permission_mode
        if gate is not None:  # edits and commands are asked of the gate
            allowed, mode = [t for t in code.tools if t in READ_TOOLS], "default"
        allowed += allowed_names(request.tools)
        return sdk.ClaudeAgentOptions(
            cwd=str(request.workspace),
            add_dirs=[str(request.project)],
            cli_path=str(self.launcher),
            env=env,
            model=request.model,
            system_prompt={"type": "preset", "preset": "claude_code", "append": request.system},
            tools=list(code.tools),
            allowed_tools=allowed,
            disallowed_tools=list(code.refused_tools),
            permission_mode=mode,  # type: ignore[arg-type]
            can_use_tool=(
                permission_callback(gate, run.emit, run.decided) if gate is not None else None
            ),
            resume=request.resume,
            max_turns=code.max_turns,
            max_budget_usd=request.max_budget_usd,
            setting_sources=[],
            mcp_servers=mcp_servers(request.tools),
            max_buffer_size=_MAX_LINE_BYTES,
            stderr=run.stderr.append,
            hooks=run.guard.hooks(READ_TOOLS if gate is not None else None),
        )


class _Run:
    """What a run has shown so far."""

    def __init__(self, request: RunRequest, on_step: OnStep) -> None:
        self.request = request
        self.on_step = on_step
        self.started = time.monotonic()
        self.status: RunStatus = "crashed"
        self.steps = request.steps_before  # a woken run numbers on
        self.tools: dict[str, str] = {}  # tool_use id -> tool name
        self.usage: dict[str, Mapping[str, Any]] = {}  # per model call (message id)
        self.result: sdk.ResultMessage | None = None
        self.problem: str | None = None
        self.stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        self.decided: set[str] = set()  # the tool calls the gate denied
        roots = (request.workspace, request.project, request.config_dir / "tmp")
        self.guard = PathGuard(roots, request.workspace)

    async def step(
        self, kind: Literal["tool", "result", "text", "approval"], line: str, **extra: Any
    ) -> None:
        self.steps += 1
        await self.on_step(RunStep(n=self.steps, kind=kind, line=line, **extra))

    async def emit(self, kind: str, line: str, tool: str | None, approval: str | None) -> None:
        """A step the gate shows (an approval asked, or decided)."""
        await self.step("approval" if kind == "approval" else "text", line, tool=tool,
                        approval=approval)  # fmt: skip

    async def take(self, message: sdk.Message) -> None:
        root = str(self.request.project)
        if isinstance(message, sdk.AssistantMessage):
            if message.usage and message.message_id:
                self.usage[message.message_id] = message.usage
            for block in message.content:
                if isinstance(block, sdk.ToolUseBlock):
                    self.tools[block.id] = block.name
                    await self.step("tool", describe_tool(block.name, block.input, root),
                                    tool=block.name)  # fmt: skip
                elif isinstance(block, sdk.TextBlock) and block.text.strip():
                    await self.step("text", first_line(block.text))
        elif isinstance(message, sdk.UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, sdk.ToolResultBlock):
                    error = bool(block.is_error)
                    tool = self.tools.get(block.tool_use_id)
                    line = ("error: " + first_line(text_of(block.content))) if error else "ok"
                    await self.step("result", line, tool=tool, is_error=error)
        elif isinstance(message, sdk.ResultMessage):
            self.result = message

    def said(self) -> str:
        """The last lines the CLI wrote on stderr, as one line."""
        return " | ".join(first_line(line) for line in self.stderr) or "nothing on stderr"

    def ended_by(self, exc: sdk.ClaudeSDKError) -> RunStatus:
        """How the run ended when the SDK raised ``exc``; a crash's problem is noted."""
        if isinstance(exc, sdk.ResultError) and self.result is not None:
            return "done"  # its error result then exit 1: how the CLI ends a failed run
        if isinstance(exc, sdk.ProcessError):
            self.problem = f"the CLI exited with code {exc.exit_code}: {self.said()}"
        elif isinstance(exc, sdk.CLIConnectionError):  # it could not start, or went away
            self.problem = first_line(str(exc)) + (f": {self.said()}" if self.stderr else "")
        else:  # a line that is not JSON, or JSON that is no message
            wrote = exc.line if isinstance(exc, sdk.CLIJSONDecodeError) else str(exc)
            self.problem = f"the CLI wrote what is not its protocol: {first_line(wrote, 120)}"
        return "crashed"

    def outcome(self) -> RunOutcome:
        result = self.result
        reported = [denied_tool(d) for d in (result.permission_denials or ())] if result else []
        # The gate's denials are the person's decisions, not failures.
        denials = tuple(tool for tool, call in reported if call not in self.decided)
        denials += tuple(tool for tool in self.guard.denied if tool not in denials)
        status = self.status
        gate = self.request.gate
        if gate is not None and gate.awaiting is not None and status in ("done", "failed"):
            status = "waiting"
        if status == "done" and (result is None or result.is_error or denials):
            status = "failed"
        problem = self.problem
        if problem is None and status == "failed" and result is not None:
            problem = failure(result, denials)
        if problem is None and status == "crashed":
            problem = f"the CLI ended without a result: {self.said()}"
        return RunOutcome(
            status=status,
            text=(result.result or "") if result else "",
            turns=result.num_turns if result else len(self.usage),
            duration_ms=int((time.monotonic() - self.started) * 1000),
            usage=usage_of(result.usage if result and result.usage else None, self.usage),
            cost_usd=result.total_cost_usd if result else None,
            denials=denials,
            problem=problem,
            session_id=result.session_id if result else None,
        )


async def _follow(
    stream: AsyncIterator[sdk.Message],
    run: _Run,
    code: CodeSpec,
    cancel: asyncio.Event | None,
    stop: Callable[[], None],
) -> RunStatus:
    """Read the run's messages until it ends; how it ended.

    Unless the CLI ended by itself, its group is stopped (``stop``) before the SDK's reader is
    let go: else the SDK closes the CLI's stdin and gives it 5 s to finish before it ends it.
    """
    deadline = run.started + code.wall_s
    cancelled = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    pending: asyncio.Future[sdk.Message] | None = None
    ended_by_itself = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timed_out"
            pending = asyncio.ensure_future(anext(stream))
            waiting = {pending} | ({cancelled} if cancelled is not None else set())
            done, _ = await asyncio.wait(
                waiting,
                timeout=min(code.inactivity_s, left),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if pending not in done:
                if cancelled is not None and cancelled in done:
                    return "cancelled"
                return "stalled" if code.inactivity_s < left else "timed_out"
            try:
                message = pending.result()
            except StopAsyncIteration:
                ended_by_itself = True
                return "done" if run.result is not None else "crashed"
            except sdk.ClaudeSDKError as exc:
                ended_by_itself = True
                return run.ended_by(exc)
            await run.take(message)
    finally:
        if cancelled is not None:
            cancelled.cancel()
        if not ended_by_itself:  # a limit, a cancel, or this task cancelled or failing
            stop()
        await _let_go(pending)


async def _let_go(pending: asyncio.Future[sdk.Message] | None) -> None:
    """Cancel a read of the SDK's still under way and wait while the SDK closes."""
    if pending is None or pending.done():
        return
    pending.cancel()
    await asyncio.wait({pending})  # not ``await pending``: a cancel of this task goes on up
    if not pending.cancelled():
        pending.exception()  # retrieved: whatever it says, it is the end we asked for


def _launcher_ended(pidfile: Path) -> None:
    """Wait (seconds at most) until the run's launcher has ended: it ends last, after all the
    run started, and the SDK may not wait for it when its reader was cancelled."""
    with contextlib.suppress(OSError, ValueError):
        wait_ended(int(pidfile.read_text(encoding="ascii").strip()), GRACE_S + 2.0)


def _stop(pidfile: Path) -> None:
    """End the run's launcher, which ends the CLI and all it started."""
    try:
        pid = int(pidfile.read_text(encoding="ascii").strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        logger.debug("no launcher to stop at %s", pidfile)
