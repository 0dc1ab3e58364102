"""Free TCP ports for the servers tests start, without two test processes racing for one.

Binding port 0 and closing the socket leaves a moment in which another process (another pytest
worker starting its own server) can be handed the same port. Here each xdist worker draws from
its own block of ports, below the kernel's ephemeral range (where port 0 draws from), starting at
a random place in it, and skips any port something is bound to.
"""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["free_port"]

_FIRST = 10_000
_BLOCK = 1_000
_BLOCKS = 20  # 10000-29999, under Linux's ephemeral range (32768-60999)

_lock = threading.Lock()
_drawn = random.randrange(_BLOCK)


def _block_start() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
    block = int(worker) % (_BLOCKS - 1) if worker.isdigit() else _BLOCKS - 1
    return _FIRST + block * _BLOCK


def _unbound(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to and no other worker hands out."""
    global _drawn
    start = _block_start()
    with _lock:
        for _ in range(_BLOCK):
            port = start + _drawn % _BLOCK
            _drawn += 1
            if _unbound(port):
                return port
    raise RuntimeError(f"no free port in {start}-{start + _BLOCK - 1}")
