"""Prompt templates: every render reads the current files and the values given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.core.prompts import Prompts
from orchestrator.errors import TemplateError


def _write(folder: Path, text: str, bump: int = 0, name: str = "t.j2") -> None:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump * 1_000_000_000))


def test_a_changed_template_or_include_is_rendered_anew(tmp_path: Path):
    """Editing a template, or a template it includes, takes effect within a second (the
    folder is looked at once a second, not at every render)."""
    _write(tmp_path, "hello {{ who }} / {% include 'part.j2' %}")
    _write(tmp_path, "part", name="part.j2")
    now = [100.0]
    prompts = Prompts(tmp_path, clock=lambda: now[0])
    assert prompts.render("t.j2", who="ada") == "hello ada / part"
    _write(tmp_path, "bye {{ who }} / {% include 'part.j2' %}", bump=5)
    _write(tmp_path, "new part", bump=5, name="part.j2")
    now[0] += 0.5
    assert prompts.render("t.j2", who="ada") == "hello ada / part"  # not looked at yet
    now[0] += 0.6
    assert prompts.render("t.j2", who="ada") == "bye ada / new part"


def test_template_errors_are_reported(tmp_path: Path):
    """An undefined name, a syntax error or a missing file is a TemplateError."""
    _write(tmp_path, "hello {{ missing }}")
    prompts = Prompts(tmp_path)
    with pytest.raises(TemplateError, match="undefined"):
        prompts.render("t.j2")
    with pytest.raises(TemplateError, match="not found"):
        prompts.render("nope.j2")
    _write(tmp_path, "hello {{ broken", name="b.j2")
    with pytest.raises(TemplateError, match="line 1"):
        prompts.render("b.j2")
