"""The layout table of docs/architecture.md names every module of the package in its layer's
row, so the tree and the table cannot drift apart; no module grows past 400 lines; and only
the adapters import redis-py (the import-linter contract ``make test`` checks)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.arena_helpers import REPO

PACKAGE = REPO / "orchestrator"
ARCHITECTURE = REPO / "docs" / "architecture.md"


def _rows() -> dict[str, str]:
    """The layout table's rows by folder (``""``: the package's top level)."""
    rows: dict[str, str] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"\| `orchestrator/([a-z_]*)/?`( top level)? \|(.*)\|$", line):
            folder, top, what = match.groups()
            rows["" if top else folder] = what
    return rows


def _modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name not in {"__init__.py", "__main__.py"} and "__pycache__" not in path.parts
    ]


def test_every_module_is_named_in_its_layers_row() -> None:
    """Each module of the package is named in its folder's row of the layout table."""
    rows = _rows()
    unnamed = []
    for path in _modules():
        parts = path.relative_to(PACKAGE).parts
        folder = parts[0] if len(parts) > 1 else ""
        if f"`{path.stem}`" not in rows.get(folder, ""):
            unnamed.append(str(path.relative_to(REPO)))
    assert not unnamed, f"modules docs/architecture.md's layout table does not name: {unnamed}"


def test_every_layer_folder_has_a_row() -> None:
    """Each subpackage has a row of its own in the layout table."""
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(_rows()), f"no layout row for {sorted(folders - set(_rows()))}"


def test_no_module_is_over_400_lines() -> None:
    """A module that grows past 400 lines is split by responsibility, not left to grow."""
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    lines = {
        str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in files
    }
    assert len(lines) > 100  # the package was found
    assert {path: n for path, n in lines.items() if n > 400} == {}


LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _redis_contract(root: Path) -> subprocess.CompletedProcess[str]:
    """Check the package under ``root`` against the contract "Only adapters import redis"."""
    return subprocess.run(
        [
            str(LINT_IMPORTS),
            *("--config", str(REPO / "pyproject.toml")),
            *("--contract", "redis-at-the-edge", "--no-cache"),
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_only_the_adapters_import_redis() -> None:
    """No module outside orchestrator/adapters imports redis-py: lint-imports keeps it so."""
    done = _redis_contract(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
    assert "Only adapters import redis KEPT" in done.stdout


def test_a_redis_import_above_the_adapters_breaks_the_contract(tmp_path: Path) -> None:
    """A runtime module importing redis-py, even only for type checking, breaks the contract."""
    copy = tmp_path / "orchestrator"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "runtime" / "dispatch.py"
    extra = "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import redis  # noqa\n"
    module.write_text(module.read_text(encoding="utf-8") + extra, encoding="utf-8")
    done = _redis_contract(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-1000:]
    assert "Only adapters import redis BROKEN" in done.stdout
    assert "orchestrator.runtime.dispatch -> redis" in done.stdout


def _steps() -> list[str]:
    """The backticked names of the section "One message, step by step", in order."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## One message, step by step", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`([^`]+)`", section)


def _resolve(module: str, name: str) -> bool:
    import importlib

    found: object = importlib.import_module(module)
    for part in name.split("."):
        if not hasattr(found, part):
            return False
        found = getattr(found, part)
    return True


def test_the_message_walkthrough_names_functions_that_exist() -> None:
    """Every module and function the step-by-step walkthrough names exists (no stale step)."""
    named: list[str] = []
    missing: list[str] = []
    after_path = False
    checked = 0
    for token in _steps():
        if token.startswith("tests/"):
            continue
        if re.fullmatch(r"[a-z_]+(/[a-z_]+)*\.py", token):
            if not (PACKAGE / token).is_file():
                missing.append(token)
            named.insert(0, "orchestrator." + token[:-3].replace("/", "."))
            after_path = True
            continue
        qualified = re.fullmatch(r"[A-Z][a-z]\w*\.[a-z_]\w*", token)
        plain = re.fullmatch(r"[A-Za-z_]\w*", token) and (after_path or "_" in token.strip("_"))
        after_path = False
        if not (qualified or plain):
            continue
        checked += 1
        modules = named if qualified else named[:1]
        if not any(_resolve(module, token) for module in modules):
            missing.append(token)
    assert checked >= 20, f"only {checked} names found: is the section still there?"
    assert not missing, f"docs/architecture.md's walkthrough names what does not exist: {missing}"
