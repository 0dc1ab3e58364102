"""The layout table of docs/architecture.md names every module of the package in its layer's
row, so the tree and the table cannot drift apart; and no module grows past 400 lines."""

from __future__ import annotations

import re
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
