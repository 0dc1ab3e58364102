"""What the console's browser tests share: `arena up` (or `arena web`) as a process, other
`arena` commands run in this process against it, headless Chromium through Playwright, pages
that fail on any dialog and save a screenshot when their test fails.

Screenshots go under ``test-artifacts/screenshots/`` (not committed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.arena_helpers import REPO, read_until, start_background, stop_process
from tests.ports import free_port

# Debian's headless shell of Chromium (the same engine, without the desktop browser around it:
# about 40 % less CPU for these tests) when installed, else Debian's chromium.
CHROMIUM = (
    shutil.which("chromium-headless-shell")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
)
ARTEFACTS = REPO / "test-artifacts" / "screenshots"
TIMEOUT_MS = 30_000

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)"
)


def console_env(tmp_path_factory: pytest.TempPathFactory, name: str) -> dict[str, str]:
    """`arena up` in a folder of its own, on free ports, with its console."""
    folder = tmp_path_factory.mktemp(name)
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(folder),
        "ARENA_DATA_DIR": str(folder / "data"),
        "ARENA_WORKSPACES_DIR": str(folder / "workspaces"),  # not the checkout's
        "ARENA_MQTT_PORT": str(free_port()),
        "ARENA_REDIS_PORT": "0",
        "ARENA_WORKERS": "1",
        "ARENA_DAEMONS": "1",
        "ARENA_WEB_PORT": str(free_port()),
    }


def start_arena(
    args: list[str], env: dict[str, str], wanted: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """`arena ARGS` as a process of its own, once it has printed ``wanted``; the lines it
    printed up to there."""
    process = start_background([sys.executable, "-m", "orchestrator", *args], env)
    try:
        printed = read_until(process, wanted, timeout_s=90)
    except AssertionError:
        stop_process(process)
        raise
    return process, printed


def stop_arena(process: subprocess.Popen[str]) -> str:
    """SIGTERM, then SIGKILL its process group after 30 s; what it printed since it started."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        rest, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        rest, _ = process.communicate()
    return rest


def arena(env: dict[str, str], *args: str) -> str:
    """`arena ARGS` run in this process with ``env`` (in a thread of its own: Playwright's
    loop runs in this one), which must succeed; what it printed on stdout."""
    from click.testing import CliRunner, Result

    from orchestrator.cli.main import main

    def invoke() -> Result:
        return CliRunner().invoke(main, list(args), env=env)

    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(invoke).result(timeout=180)
    trace = "".join(traceback.format_exception(done.exception)) if done.exception else ""
    assert done.exit_code == 0, done.output + trace
    return done.stdout


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium (Debian's), driven by Playwright. Its assertions (``expect``) wait as
    long as its actions do: their own default is 5 s, which a loaded machine can pass before a
    page's live feed has connected."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def fresh_page(browser: Any) -> Iterator[Any]:
    """A page of its own; a dialog (an alert a message managed to run) fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        yield page
    finally:
        context.close()
    assert dialogs == [], f"a message ran script: {dialogs}"


def save_screenshot(page: Any, name: str) -> None:
    """The whole page as a PNG under ``test-artifacts/screenshots/``. Taken when a test fails
    only: one after every test cost the browser and the test process about 2 CPU-s a run."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / f"{name}.png"), full_page=True)
