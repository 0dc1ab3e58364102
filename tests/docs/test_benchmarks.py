"""Every benchmark of ``tests/bench/`` still imports: the names it takes from the package
resolve (a benchmark is run by hand, so nothing else would notice one broken by a rename)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.arena_helpers import REPO

BENCHES = sorted((REPO / "tests" / "bench").glob("*.py"))
# Modules the benchmarks import: they have no command line of their own.
HELPERS = {"daemon_env", "mqtt_tally", "peer_workload", "peer_autogen", "peer_maf"}


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_each_benchmark_imports(bench: Path) -> None:
    """The benchmark's module loads, and it has the ``main`` its command line runs."""
    spec = importlib.util.spec_from_file_location(f"bench_{bench.stem}", bench)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    if bench.stem not in HELPERS:
        assert callable(getattr(module, "main", None)), f"{bench.name} has no main()"


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ('{"id": "a", "question": "q", "file": "config.md"}', "1: want {id, question"),
        ('{"id": "a", "question": "q", "file": "config.md", "lines": [9, 2]}', "not a range"),
        ("not json", "1: want {id, question"),
        ('{"id": "a", "question": "q", "file": "none.md", "lines": [1, 2]}', "not in --docs"),
        ("", "no questions"),
    ],
    ids=["no-lines", "reversed", "not-json", "absent-file", "empty"],
)
def test_the_knowledge_bench_refuses_bad_questions_in_one_line(
    lines: str, said: str, tmp_path: Path
) -> None:
    """A held-out question set with a mistake is named, line and all, before any work."""
    questions = tmp_path / "questions.jsonl"
    questions.write_text(lines + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO / "tests/bench/knowledge.py"), "--questions", str(questions)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr
