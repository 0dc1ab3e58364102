"""The web console under load: a big room opening, and what people watching rooms cost.

    python tests/bench/console.py [--room-messages N] [--messages M] [--groups G]
        [--watchers W] [--rounds R] [--json OUT] [--keep]

In a temporary folder one ``arena up`` runs on the embedded stack (the offline model) with its
console on a free port, and these are measured over HTTP, as a browser would ask:

    room            a group of N (10,000) messages brought in with ``arena import``; opening
                    its room is the page, then its newest 50 messages (the room's first
                    request): time for both, p50/p95 over 50 openings (target <= 300 ms)
    messages        ``GET /api/groups/{group}/messages`` p50/p95 over 200 requests: the
                    newest page, and pages reached by their cursors all the way back
                    (target p95 <= 20 ms)
    browser         with Debian's ``chromium`` installed: from navigating to the room to its
                    newest 50 messages on screen, p50/p95 over 10 openings
    watchers        M (1,000) messages over G (20) groups (each mentioning an agent, so each
                    gets one reply) posted at once through Redis, timed from the first post to
                    the last ``done`` item (Redis entry ids, ms): messages/s with nobody
                    watching, and with W (50) clients following the groups' events
                    (server-sent events, spread over the groups, each reading every event, in
                    threads of this process: their own cost counts too), alternating R (3)
                    times on fresh groups; the ratio of the medians (target >= 0.90: watchers
                    cost the daemon at most 10 %)

Prints a table and ends with one line ``room_open_p95_ms=… messages_p95_ms=…
throughput_ratio=…``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import redis

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.core.wire import inbox_stream, outbox_stream  # noqa: E402
from tests.waiting import block_until  # noqa: E402

ROOM = "big-room"
AGENTS = ("architect", "developer", "tester", "receptionist")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


# ---------------------------------------------------------------------------------- arena up


@contextlib.contextmanager
def arena_up(folder: Path) -> Iterator[dict[str, str]]:
    """``arena up`` in ``folder``, its console and Redis on free ports; its environment."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(folder),
        "ARENA_DATA_DIR": str(folder / "data"),
        "ARENA_WORKSPACES_DIR": str(folder / "workspaces"),
        "ARENA_REDIS_PORT": str(_free_port()),
        "ARENA_MQTT_PORT": str(_free_port()),
        "ARENA_WEB_PORT": str(_free_port()),
        "ARENA_WORKERS": "1",
    }
    log = (folder / "arena-up.log").open("w")
    up = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "up"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def ready() -> bool:
            if up.poll() is not None:
                raise SystemExit(
                    "arena up did not start:\n" + (folder / "arena-up.log").read_text()
                )
            return "arena: ready" in (folder / "arena-up.log").read_text()

        block_until(ready, timeout_s=120, what="arena up to be ready")
        yield env
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
        log.close()


def _import_room(folder: Path, env: dict[str, str], count: int) -> float:
    """``count`` messages into ROOM through ``arena import``; seconds it took."""
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    lines = []
    for n in range(count):
        at = (start + timedelta(seconds=30 * n)).isoformat()
        sender = ("alex", "sam")[n % 2]
        text = f"Message {n}: **notes** on the plan, item {n % 97}, see `api/v{n % 5}`."
        lines.append(json.dumps({"sender": sender, "text": text, "created_at": at}))
    path = folder / "room.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "import", ROOM, str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"arena import failed: {done.stderr or done.stdout}")
    return time.perf_counter() - began


# ---------------------------------------------------------------------------------- the room


def measure_room(base: str, openings: int = 50, requests: int = 200) -> dict[str, Any]:
    """Opening the room (page + newest messages) and paging through it, over HTTP."""
    with httpx.Client(base_url=base, timeout=30) as http:
        http.get(f"/groups/{ROOM}").raise_for_status()  # warm
        opening = []
        for _ in range(openings):
            began = time.perf_counter()
            http.get(f"/groups/{ROOM}").raise_for_status()
            http.get(f"/api/groups/{ROOM}/messages", params={"limit": 50}).raise_for_status()
            opening.append((time.perf_counter() - began) * 1000)
        newest, paging = [], []
        for _ in range(requests):
            began = time.perf_counter()
            http.get(f"/api/groups/{ROOM}/messages", params={"limit": 50}).raise_for_status()
            newest.append((time.perf_counter() - began) * 1000)
        cursor: int | None = None
        while len(paging) < requests:
            params: dict[str, Any] = {"limit": 50}
            if cursor is not None:
                params["before"] = cursor
            began = time.perf_counter()
            page = http.get(f"/api/groups/{ROOM}/messages", params=params)
            paging.append((time.perf_counter() - began) * 1000)
            page.raise_for_status()
            cursor = page.json()["before"]
            if cursor is None:
                cursor = None  # back to the newest page
    return {
        "open_p50_ms": statistics.median(opening),
        "open_p95_ms": _pct(opening, 0.95),
        "newest_p50_ms": statistics.median(newest),
        "newest_p95_ms": _pct(newest, 0.95),
        "paging_p50_ms": statistics.median(paging),
        "paging_p95_ms": _pct(paging, 0.95),
    }


def measure_browser(base: str, openings: int = 10) -> dict[str, Any] | None:
    """From navigating to the room to its newest 50 messages on screen, in Chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    times = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{base}/groups/{ROOM}")  # warm
        page.wait_for_selector("li.msg >> nth=49")
        for _ in range(openings):
            began = time.perf_counter()
            page.goto(f"{base}/groups/{ROOM}")
            page.wait_for_selector("li.msg >> nth=49")
            times.append((time.perf_counter() - began) * 1000)
        browser.close()
    return {
        "browser_open_p50_ms": statistics.median(times),
        "browser_open_p95_ms": _pct(times, 0.95),
    }


# ---------------------------------------------------------------------------------- watchers


class Watchers:
    """W clients following the groups' events, each in a thread of its own."""

    def __init__(self, base: str, groups: list[str], count: int) -> None:
        self.base = base
        self.stop = threading.Event()
        self.events = 0
        self.lock = threading.Lock()
        self.connected = threading.Barrier(count + 1) if count else None
        self.threads = [
            threading.Thread(target=self._follow, args=(groups[n % len(groups)],), daemon=True)
            for n in range(count)
        ]

    def _follow(self, group: str) -> None:
        with contextlib.suppress(httpx.HTTPError):  # the console stopped
            self._read(group)

    def _read(self, group: str) -> None:
        announced = False
        with (
            httpx.Client(base_url=self.base, timeout=None) as http,
            http.stream("GET", f"/api/groups/{group}/events") as response,
        ):
            for line in response.iter_lines():
                if not announced and self.connected is not None:
                    announced = True
                    self.connected.wait(timeout=60)
                if line.startswith("event:"):
                    with self.lock:
                        self.events += 1
                if self.stop.is_set():
                    return

    def __enter__(self) -> Watchers:
        for thread in self.threads:
            thread.start()
        if self.connected is not None:
            self.connected.wait(timeout=60)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()  # each ends at its next line (a keep-alive at the latest)


def _drive(client: redis.Redis, groups: list[str], count: int) -> float:
    """Post ``count`` messages over ``groups`` at once; messages/s until the last is done."""
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        text = f"@{AGENTS[n % len(AGENTS)]} message {n}"
        pipe.xadd(
            inbox_stream(), {"group": groups[n % len(groups)], "sender": "bench", "text": text}
        )
    posted = [entry.decode() for entry in pipe.execute()]
    wanted = set(posted)
    last = dict.fromkeys((outbox_stream(g) for g in groups), "0-0")
    finished = 0
    deadline = time.monotonic() + 600
    while wanted and time.monotonic() < deadline:
        for stream, items in client.xread(last, count=1000, block=1000) or []:
            name = stream.decode()
            for entry_id, fields in items:
                last[name] = entry_id.decode()
                if (
                    fields.get(b"type") == b"done"
                    and fields.get(b"in_reply_to", b"").decode() in wanted
                ):
                    wanted.discard(fields[b"in_reply_to"].decode())
                    finished = max(finished, _ms(entry_id.decode()))
    if wanted:
        raise SystemExit(f"{len(wanted)} messages were not answered within 10 minutes")
    return count / max(0.001, (finished - _ms(posted[0])) / 1000)


def measure_watchers(
    base: str, redis_url: str, messages: int, groups: int, watchers: int, rounds: int
) -> dict[str, Any]:
    """Messages/s without and with the watchers, alternating ``rounds`` times (fresh groups
    each run); the ratio of the medians."""
    client = redis.Redis.from_url(redis_url)
    _drive(client, ["warm-up"], len(AGENTS))
    alone, watched, seen = [], [], 0
    for n in range(rounds):
        alone.append(_drive(client, [f"alone-{n}-{g}" for g in range(groups)], messages))
        names = [f"watched-{n}-{g}" for g in range(groups)]
        with Watchers(base, names, watchers) as crowd:
            watched.append(_drive(client, names, messages))
            time.sleep(1)
            seen += crowd.events
    return {
        "alone_per_s": statistics.median(alone),
        "watched_per_s": statistics.median(watched),
        "alone_runs": [round(x) for x in alone],
        "watched_runs": [round(x) for x in watched],
        "watchers": watchers,
        "events_seen": seen,
        "throughput_ratio": statistics.median(watched) / statistics.median(alone),
    }


# ---------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--room-messages", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each")
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="arena-console-"))
    report: dict[str, Any] = {"room_messages": args.room_messages, "messages": args.messages}
    try:
        with arena_up(folder) as env:
            base = f"http://127.0.0.1:{env['ARENA_WEB_PORT']}"
            report["import_s"] = _import_room(folder, env, args.room_messages)
            report.update(measure_room(base))
            report.update(measure_browser(base) or {})
            redis_url = f"redis://127.0.0.1:{env['ARENA_REDIS_PORT']}/0"
            report.update(
                measure_watchers(
                    base, redis_url, args.messages, args.groups, args.watchers, args.rounds
                )
            )
    finally:
        if args.keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(
        f"console bench: room of {args.room_messages} messages; {args.messages} messages over "
        f"{args.groups} groups, {args.watchers} watchers"
    )
    for name, value in report.items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        print(f"  {name:<22} {shown}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    print(
        f"room_open_p95_ms={report['open_p95_ms']:.1f} "
        f"messages_p95_ms={max(report['newest_p95_ms'], report['paging_p95_ms']):.1f} "
        f"throughput_ratio={report['throughput_ratio']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
