"""Processes for the tests that race several of them on one file or database.

They are forked from one server process that has imported pytest and the storage modules once,
so that each new process starts in milliseconds instead of importing them again. Each is still a
process of its own, with its own connections, locks and file handles.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext

__all__ = ["process_context"]

_PRELOAD = [
    "pytest",
    "orchestrator.memory.db",
    "orchestrator.memory.personal",
    "orchestrator.memory.schema",
    "orchestrator.memory.versions.file",
    "orchestrator.memory.versions.store",
]


def process_context() -> ForkServerContext:
    """A multiprocessing context whose processes are forked from the preloaded server."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context
