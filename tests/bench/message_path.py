"""Which of the package's modules one message runs through, from the daemon reading it to the
published reply.

    python tests/bench/message_path.py [--json OUT] [--keep]

A daemon runs in this process on the embedded Redis (its unix socket), the offline model and an
MQTT URL nobody answers at (the events are dropped, as they are when the broker is away). One
message is answered first, so that what runs once (imports, opening the stores, the first
turn's caches) is done; then a second message, "@architect …" in the same group, is posted from
a thread of its own and its reply awaited. Every Python function call in the daemon's threads
between the post and the reply's ``done`` item is seen by a profile hook (``sys.setprofile`` and
``threading.setprofile``, installed before the daemon starts); the modules of ``orchestrator``
they belong to are the message's path. The posting thread is not counted: the path starts when
the daemon takes the message. What the daemon's own loops run meanwhile (lease renewals, the
router) is counted too: it runs on the message's clock.

Prints the modules by package, and ends with one line ``modules=… packages=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

PACKAGE = REPO / "orchestrator"
GROUP = "path"
FIRST = "@architect we decided to use JWT, please design the token schema"
MEASURED = "@architect how long should the refresh tokens live?"


class PathRecorder:
    """A profile hook: the package's modules whose functions are called while recording,
    from every thread but the ones told to be ignored."""

    def __init__(self) -> None:
        self.recording = False
        self.ignored: set[int] = set()
        self.modules: set[str] = set()

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event != "call":
            return
        if threading.get_ident() in self.ignored:
            return
        name = frame.f_code.co_filename
        if name.startswith(str(PACKAGE)):
            self.modules.add(name)

    def install(self) -> None:
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)

    def remove(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def module_name(path: str) -> str:
    relative = Path(path).relative_to(REPO).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


async def trace(folder: Path, recorder: PathRecorder) -> None:
    from orchestrator.adapters.redis_server import RedisServer
    from orchestrator.client import ArenaClient
    from orchestrator.settings import load_settings
    from tests.arena_helpers import running_daemon
    from tests.bench.daemon_env import copy_workspaces, dead_port

    server = RedisServer(folder / "redis", unix_socket=folder / "redis" / "redis.sock")
    server.start()
    try:
        copy_workspaces(folder / "workspaces")
        settings = load_settings(
            redis_url=server.url,
            mqtt_url=f"mqtt://127.0.0.1:{dead_port()}",
            data_dir=folder / "data",
            agents_dir=REPO / "agents",
            workspaces_dir=folder / "workspaces",
            prompts_dir=REPO / "prompts",
            anthropic_api_key="",
        )
        (folder / "data").mkdir()

        def post(text: str) -> None:
            recorder.ignored.add(threading.get_ident())
            with ArenaClient(server.url) as client:
                client.post_and_wait(GROUP, text, "alex", 120)

        async with running_daemon(settings):
            await asyncio.to_thread(post, FIRST)
            recorder.recording = True
            await asyncio.to_thread(post, MEASURED)
            recorder.recording = False
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="arena-path-"))
    recorder = PathRecorder()
    recorder.install()
    try:
        asyncio.run(trace(folder, recorder))
    finally:
        recorder.remove()
        if args.keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    names = sorted(module_name(path) for path in recorder.modules)
    by_package: dict[str, list[str]] = defaultdict(list)
    for name in names:
        package, _, module = name.rpartition(".")
        by_package[package].append(module)
    print(f"one message's path: {len(names)} modules of the package")
    for package, modules in sorted(by_package.items()):
        print(f"  {package:<34} {len(modules):>3}  {', '.join(modules)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"modules": names}, indent=2))
    print(f"modules={len(names)} packages={len(by_package)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
