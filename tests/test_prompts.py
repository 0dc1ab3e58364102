"""Prompt templates: rendered texts are reused for the same key, until the file changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import TemplateError
from orchestrator.prompts import Prompts


def _write(folder: Path, text: str, bump: int = 0) -> None:
    path = folder / "t.j2"
    path.write_text(text, encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump * 1_000_000_000))


def test_a_keyed_render_is_reused_for_its_key_only(tmp_path: Path):
    _write(tmp_path, "hello {{ who }}")
    prompts = Prompts(tmp_path)
    assert prompts.render_keyed("t.j2", "a", who="ada") == "hello ada"
    # Same key: the text rendered before (the caller promised the key stands for the values).
    assert prompts.render_keyed("t.j2", "a", who="bob") == "hello ada"
    assert prompts.render_keyed("t.j2", "b", who="bob") == "hello bob"
    assert prompts.render("t.j2", who="cy") == "hello cy"  # no key: always rendered


def test_a_changed_template_is_rendered_anew(tmp_path: Path):
    _write(tmp_path, "hello {{ who }}")
    prompts = Prompts(tmp_path)
    assert prompts.render_keyed("t.j2", "a", who="ada") == "hello ada"
    _write(tmp_path, "bye {{ who }}", bump=5)
    assert prompts.render_keyed("t.j2", "a", who="ada") == "bye ada"


def test_a_keyed_render_reports_template_errors(tmp_path: Path):
    _write(tmp_path, "hello {{ missing }}")
    prompts = Prompts(tmp_path)
    with pytest.raises(TemplateError, match="undefined"):
        prompts.render_keyed("t.j2", "a")
