"""Mosquitto for the tests and the benchmarks: where it is installed, and one running."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.waiting import block_until

__all__ = ["mosquitto_executable", "running_mosquitto"]


def mosquitto_executable() -> str | None:
    """Mosquitto's path, or None (Debian installs it in /usr/sbin, not on every user's PATH)."""
    return shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")


@contextlib.contextmanager
def running_mosquitto(
    executable: str,
    port: int,
    folder: Path,
    options: str = "allow_anonymous true\n",
    timeout_s: float = 10.0,
) -> Iterator[str]:
    """Mosquitto with one listener on ``127.0.0.1:port``, its config and log in ``folder``;
    ``options`` are config lines for the listener and the broker. Yields its URL.

    Raises:
        RuntimeError: it exited, or did not listen within ``timeout_s`` (its log attached).
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "mosquitto.conf"
    config.write_text(f"listener {port} 127.0.0.1\n{options}persistence false\n")
    log = folder / "mosquitto.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [executable, "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:

        def listening() -> bool:
            if process.poll() is not None:
                raise RuntimeError(
                    f"mosquitto exited with code {process.returncode}: {log.read_text()}"
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return True
            return False

        try:
            block_until(listening, timeout_s=timeout_s, what=f"mosquitto on port {port}")
        except AssertionError as exc:
            raise RuntimeError(f"{exc}: {log.read_text()}") from exc
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
