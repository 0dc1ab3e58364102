"""`arena up` serves the console beside the daemon and stops it with the daemon; `arena web`
serves it alone against the embedded Redis of a running `arena up`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.arena_helpers import REPO, read_until, write_team
from tests.ports import free_port


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        rest, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        rest, _ = process.communicate()
    return rest


@pytest.mark.slow
def test_up_serves_the_console_and_web_serves_it_alone(tmp_path: Path):
    """`arena up` prints the console's URL and answers there; `arena web` on another port
    reads the same groups through up's embedded Redis; both stop cleanly on SIGTERM."""
    up_port, web_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
        "ARENA_WORKSPACES_DIR": str(tmp_path / "ws"),
        "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
        "ARENA_MQTT_PORT": str(free_port()),
        "ARENA_REDIS_PORT": "0",
        "ARENA_WORKERS": "0",
        "ARENA_WEB_PORT": str(up_port),
    }
    up = _start(["up"], env)
    try:
        printed = read_until(up, "arena: ready", timeout_s=60)
        assert f"arena: console http://127.0.0.1:{up_port}" in printed
        base = f"http://127.0.0.1:{up_port}"
        posted = httpx.post(f"{base}/api/groups/demo/messages", json={"text": "@pong hi"})
        assert posted.status_code == 202
        web = _start(["web"], {**env, "ARENA_WEB_PORT": str(web_port)})
        try:
            assert read_until(web, "arena: console", timeout_s=60) == [
                f"arena: console http://127.0.0.1:{web_port}"
            ]
            agents = httpx.get(f"http://127.0.0.1:{web_port}/api/agents", timeout=10)
            assert [a["id"] for a in agents.json()["agents"]] == ["helper", "ping", "pong"]
            letters = httpx.get(f"http://127.0.0.1:{web_port}/api/dead-letters", timeout=10)
            assert letters.json() == {"dead_letters": []}
        finally:
            rest = _stop(web)
        assert web.returncode == 0, rest
        assert rest.strip().endswith("arena: stopped")
        assert "Uvicorn" not in rest
    finally:
        rest = _stop(up)
    assert up.returncode == 0, rest
    assert "arena: stopped" in rest
    assert "GET /api" not in rest  # no line per request on the terminal
