"""Prompt templates: every render reads the current files and the values given."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.core.prompts import Prompts
from orchestrator.core.template_keys import Keys
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


@dataclass(frozen=True)
class _Member:
    name: str


@dataclass
class _Mutable:
    name: str


def test_a_kept_render_is_given_again_only_for_the_same_values(tmp_path: Path):
    """``render_kept`` renders again when a value the template or its include reads changes,
    a frozen object counting by identity; values it does not read are not looked at; a
    mutable object is never kept; an edited template is rendered anew."""
    _write(tmp_path, "{{ who.name }} in {{ group }}: {% include 'part.j2' %}")
    _write(tmp_path, "{% for m in team %}{{ m.name }} {% endfor %}", name="part.j2")
    now = [100.0]
    prompts = Prompts(tmp_path, clock=lambda: now[0])
    ada, bob = _Member("ada"), _Member("bob")
    first = prompts.render_kept("t.j2", who=ada, group="g", team=(ada, bob), unread=1)
    assert first == "ada in g: ada bob "
    assert prompts.render_kept("t.j2", who=ada, group="g", team=(ada, bob), unread=2) == first
    assert prompts.render_kept("t.j2", who=ada, group="h", team=(ada, bob)) == "ada in h: ada bob "
    assert prompts.render_kept("t.j2", who=ada, group="g", team=[ada]) == "ada in g: ada "
    assert prompts.render_kept("t.j2", who=_Member("ada"), group="g", team=()) == "ada in g: "
    cy = _Mutable("cy")
    assert prompts.render_kept("t.j2", who=cy, group="g", team=()) == "cy in g: "
    cy.name = "dee"
    assert prompts.render_kept("t.j2", who=cy, group="g", team=()) == "dee in g: "
    _write(tmp_path, "{{ group }}!", bump=5)
    now[0] += 1.1
    assert prompts.render_kept("t.j2", who=ada, group="g", team=(ada, bob)) == "g!"
    with pytest.raises(TemplateError, match="undefined"):
        prompts.render_kept("t.j2", who=ada)


@dataclass(frozen=True)
class _Message:
    sender: str
    text: str


def test_a_kept_render_counts_only_the_attributes_read(tmp_path: Path):
    """Where a template reads ``name.attribute`` only, another object with the same such
    attributes gives the kept text; where it uses the value any other way (through a
    filter here), the object itself counts."""
    _write(tmp_path, "from {{ m.sender }}")
    _write(tmp_path, "{{ m | attr('text') }} from {{ m.sender }}", name="whole.j2")
    prompts = Prompts(tmp_path)
    renders = []
    original = prompts._render

    def counting(name: str, variables: dict[str, object]) -> str:
        renders.append(name)
        return original(name, variables)

    prompts._render = counting  # type: ignore[method-assign]
    assert prompts.render_kept("t.j2", m=_Message("ada", "one")) == "from ada"
    assert prompts.render_kept("t.j2", m=_Message("ada", "two")) == "from ada"
    assert prompts.render_kept("t.j2", m=_Message("bob", "two")) == "from bob"
    assert renders == ["t.j2", "t.j2"]
    assert prompts.render_kept("whole.j2", m=_Message("ada", "one")) == "one from ada"
    assert prompts.render_kept("whole.j2", m=_Message("ada", "two")) == "two from ada"


def test_how_a_type_counts_is_remembered_per_type(tmp_path: Path):
    """How a value counts is looked up once per type: a mutable type of the same name as a
    frozen one seen before is still rendered afresh, and the frozen one still kept."""
    _write(tmp_path, "{{ who.name }}")
    prompts = Prompts(tmp_path)

    @dataclass(frozen=True)
    class Person:
        name: str

    kept = Person("ada")
    assert prompts.render_kept("t.j2", who=kept) == "ada"

    @dataclass  # type: ignore[no-redef]
    class Person:
        name: str

    changing = Person("bob")
    assert prompts.render_kept("t.j2", who=changing) == "bob"
    changing.name = "cy"
    assert prompts.render_kept("t.j2", who=changing) == "cy"
    assert prompts.render_kept("t.j2", who=kept) == "ada"
    keys = Keys()
    reads = (("who", None),)
    alive: list[object] = []
    assert keys.key_of("t.j2", reads, {"who": changing}, alive) is None
    assert keys.key_of("t.j2", reads, {"who": ("a", 1, True, [kept])}, alive) == (
        "t.j2",
        (tuple, ("a", (int, 1), (bool, True), (tuple, ((object, id(kept)),)))),
    )
    assert keys.key_of("t.j2", reads, {"who": [changing]}, alive) is None
    assert alive == [kept]


def test_a_kept_stripped_render_is_the_same_string_while_kept(tmp_path: Path):
    """``render_kept_stripped`` gives the kept text stripped, the very same string while the
    text is kept, and the new text once a value it reads or the template changes."""
    _write(tmp_path, "  {{ who }} \n")
    now = [100.0]
    prompts = Prompts(tmp_path, clock=lambda: now[0])
    first = prompts.render_kept_stripped("t.j2", who="ada")
    assert first == "ada"
    assert prompts.render_kept_stripped("t.j2", who="ada") is first
    assert prompts.render_kept("t.j2", who="ada") == "  ada \n"
    assert prompts.render_kept_stripped("t.j2", who="bob") == "bob"
    _write(tmp_path, "hi {{ who }}\n", bump=5)
    now[0] += 1.1
    assert prompts.render_kept_stripped("t.j2", who="ada") == "hi ada"


def test_a_tuple_that_cannot_change_is_looked_at_once(tmp_path: Path):
    """A tuple of frozen values and strings (a team's roster) is walked once: its form is
    kept with the tuple, which then keeps its items alive for the key. Another tuple is keyed
    by its own items, and a tuple holding a list is walked each time, so a change in the list
    is rendered."""

    @dataclass(frozen=True)
    class Person:
        name: str

    team = (Person("ada"), Person("bob"), "lead")
    keys, reads = Keys(), (("team", None),)
    first: list[object] = []
    key = keys.key_of("t.j2", reads, {"team": team}, first)
    assert first == [team[0], team[1]]
    again: list[object] = []
    assert keys.key_of("t.j2", reads, {"team": team}, again) == key
    assert again == [team]
    other = (team[0], Person("cy"), "lead")
    assert keys.key_of("t.j2", reads, {"team": other}, []) != key
    _write(tmp_path, "{% for p in team %}{{ p }} {% endfor %}")
    prompts = Prompts(tmp_path)
    names = ["ada"]
    held = ("lead", names)
    assert prompts.render_kept("t.j2", team=held) == "lead ['ada'] "
    names.append("bob")
    assert prompts.render_kept("t.j2", team=held) == "lead ['ada', 'bob'] "
