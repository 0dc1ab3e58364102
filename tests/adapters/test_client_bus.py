"""The blocking connection commands and the Python client follow a group with."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from orchestrator.adapters.client_bus import ClientBus
from orchestrator.errors import BusUnavailable


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections and reads, but never answers (as a Redis that
    stopped answering on a connection it kept open)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


@pytest.mark.parametrize("block_ms", [1000, 0, 60_000])
def test_a_server_that_never_answers_is_unavailable_not_a_hang(silent_server: str, block_ms: int):
    """A blocking read of a group's stream gets no answer: it fails as Redis unavailable after
    the read timeout, whatever the wait asked (0 included), instead of waiting for ever."""
    bus = ClientBus(silent_server, read_timeout_s=0.5)
    with pytest.raises(BusUnavailable):
        bus.wait_after("demo", "0-0", block_ms)
    bus.close()
