"""Tests for orchestrator.core.agents: loading agents/*.yaml and the agents' workspaces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.core.agents import load_agents, read_identity, workspace_dir
from orchestrator.core.models import RoutingRule
from orchestrator.core.routing import route
from orchestrator.errors import AgentDefinitionError, ValidationError

ROOT = Path(__file__).resolve().parents[2]

GOOD = {
    "id": "architect",
    "name": "Architect",
    "role": "software architect",
    "model": "claude-sonnet-4-5",
}


def write(folder: Path, name: str, document: object) -> Path:
    path = folder / name
    text = document if isinstance(document, str) else yaml.safe_dump(document, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    return path


def with_rule(**rule: object) -> dict[str, object]:
    return {**GOOD, "routing": {"rules": [rule]}}


def test_shipped_agents_load():
    """The shipped agents/ folder holds four valid agents with exactly one default."""
    agents = load_agents(ROOT / "agents")
    assert [a.id for a in agents] == ["architect", "developer", "receptionist", "tester"]
    assert [a.id for a in agents if a.default] == ["receptionist"]
    for spec in agents:
        assert spec.rules, spec.id
        assert spec.model.startswith("claude-")


def test_shipped_agents_have_identity_files():
    """Every shipped agent has a non-trivial CLAUDE.md and SOUL.md in its workspace."""
    for spec in load_agents(ROOT / "agents"):
        role, soul = read_identity(ROOT / "workspaces", spec.id)
        assert len(role.split()) >= 150, spec.id
        assert len(soul.split()) >= 100, spec.id


def test_full_schema_loads(tmp_path):
    """Every documented field reaches the AgentSpec and its rules."""
    write(
        tmp_path,
        "architect.yaml",
        {
            **GOOD,
            "description": "Designs systems.",
            "models": {"fast": "claude-haiku-4-5"},
            "temperature": 0.4,
            "max_tokens": 2048,
            "max_concurrency": 2,
            "default": True,
            "routing": {
                "rules": [
                    {
                        "name": "design",
                        "keywords": ["design", "架构"],
                        "patterns": [r"\bAPI\b"],
                        "min_length": 1,
                        "max_length": 4000,
                        "priority": 50,
                    },
                    {"keywords": ["review"], "agents": ["architect", "architect"]},
                ]
            },
        },
    )
    (spec,) = load_agents(tmp_path)
    assert spec.temperature == 0.4
    assert spec.models == {"fast": "claude-haiku-4-5"}
    assert (spec.max_tokens, spec.max_concurrency, spec.default) == (2048, 2, True)
    assert spec.rules[0] == RoutingRule(
        agents=("architect",),
        name="design",
        keywords=("design", "架构"),
        patterns=(r"\bAPI\b",),
        min_length=1,
        max_length=4000,
        priority=50,
    )
    assert spec.rules[1].agents == ("architect",)
    assert spec.rules[1].name == ""


def test_files_load_in_name_order(tmp_path):
    """Agents come back sorted by file name, which is the routing tie-break order."""
    for agent_id in ("zeta", "alpha", "mid"):
        write(tmp_path, f"{agent_id}.yaml", {**GOOD, "id": agent_id, "name": agent_id.title()})
    write(tmp_path, "notes.txt", "not an agent")
    assert [a.id for a in load_agents(tmp_path)] == ["alpha", "mid", "zeta"]


BAD_FILES = [
    pytest.param("id: [unclosed\n", "", "invalid YAML at line", id="yaml-syntax"),
    pytest.param(
        "id: architect\nname: A\nid: tester\n", "", "duplicate key 'id'", id="duplicate-key"
    ),
    pytest.param("- a list\n", "", "expected a mapping", id="not-a-mapping"),
    pytest.param("", "", "got empty", id="empty"),
    pytest.param({**GOOD, "max_tokens": "many"}, "max_tokens", "integer", id="wrong-type"),
    pytest.param({**GOOD, "default": "yes"}, "default", "boolean", id="string-bool"),
    pytest.param({**GOOD, "colour": "blue"}, "colour", "unknown field", id="unknown-field"),
    pytest.param({k: v for k, v in GOOD.items() if k != "model"}, "model", "required", id="miss"),
    pytest.param({**GOOD, "name": "  "}, "name", "empty", id="blank-name"),
    pytest.param({**GOOD, "temperature": 1.5}, "temperature", "1", id="temperature"),
    pytest.param({**GOOD, "max_concurrency": 0}, "max_concurrency", "1", id="concurrency"),
    pytest.param(
        with_rule(keywords=["x"], patterns=["ok", "(unclosed"]),
        "routing.rules[0].patterns[1]",
        "invalid regular expression",
        id="bad-regex",
    ),
    pytest.param(
        with_rule(keywords=["x"], weight=3),
        "routing.rules[0].weight",
        "unknown field",
        id="unknown-rule-field",
    ),
    pytest.param(
        with_rule(keywords=["x", 3]), "routing.rules[0].keywords[1]", "string", id="keyword-type"
    ),
    pytest.param(
        with_rule(priority=5), "routing.rules[0]", "keywords, patterns", id="rule-no-condition"
    ),
    pytest.param(
        with_rule(min_length=10, max_length=5),
        "routing.rules[0].min_length",
        "greater than max_length",
        id="rule-bounds",
    ),
    pytest.param(
        with_rule(keywords=["x"], agents=["ghost"]),
        "routing.rules[0].agents[0]",
        "unknown agent 'ghost'",
        id="unknown-rule-agent",
    ),
    pytest.param(
        {**GOOD, "routing": {"rules": [{"name": "a", "keywords": ["x"]}] * 2}},
        "routing.rules[1].name",
        "already the name",
        id="duplicate-rule-name",
    ),
    pytest.param({**GOOD, "id": "Architect"}, "id", "must match", id="id-pattern"),
    pytest.param({**GOOD, "id": "architect\n"}, "id", "must match", id="id-newline"),
    pytest.param({**GOOD, "id": "developer"}, "id", "file name", id="stem-mismatch"),
]


@pytest.mark.parametrize(("document", "field", "problem"), BAD_FILES)
def test_bad_definition_names_file_and_field(tmp_path, document, field, problem):
    """Each kind of mistake raises AgentDefinitionError naming the file and the field."""
    path = write(tmp_path, "architect.yaml", document)
    with pytest.raises(AgentDefinitionError) as caught:
        load_agents(tmp_path)
    error = caught.value
    assert error.path == str(path)
    assert error.field == field
    assert problem in error.problem
    assert str(error).startswith(f"{path}: {field}" if field else f"{path}: ")


def test_duplicate_id_across_files(tmp_path):
    """Two files defining the same id are refused, naming the second file."""
    write(tmp_path, "architect.yaml", GOOD)
    second = write(tmp_path, "builder.yaml", {**GOOD, "name": "Builder"})
    with pytest.raises(AgentDefinitionError, match="duplicate id 'architect'") as caught:
        load_agents(tmp_path)
    assert (caught.value.path, caught.value.field) == (str(second), "id")


def test_duplicate_name_across_files(tmp_path):
    """Two agents answering to the same @name are refused, whatever the case or spacing."""
    write(tmp_path, "architect.yaml", {**GOOD, "name": "QA Lead"})
    second = write(tmp_path, "builder.yaml", {**GOOD, "id": "builder", "name": "qalead"})
    with pytest.raises(AgentDefinitionError, match="already an id or name") as caught:
        load_agents(tmp_path)
    assert (caught.value.path, caught.value.field) == (str(second), "name")


@pytest.mark.parametrize(
    ("document", "field", "reads_as"),
    [
        ({**GOOD, "id": "arena", "name": "Arena Bot"}, "id", "arena"),
        ({**GOOD, "name": "System"}, "name", "system"),
        ({**GOOD, "name": "U-S-E-R"}, "name", "user"),
    ],
)
def test_an_agent_cannot_be_named_as_the_arena_or_a_person(tmp_path, document, field, reads_as):
    """An agent called `arena`, `system` or `user` (in any case or spacing) is refused, naming
    the file and field: its replies would read as the arena's notices or a person's words."""
    path = write(tmp_path, f"{document['id']}.yaml", document)
    with pytest.raises(AgentDefinitionError, match=f"reads as {reads_as!r}") as caught:
        load_agents(tmp_path)
    assert (caught.value.path, caught.value.field) == (str(path), field)


def test_more_than_one_default(tmp_path):
    """Only one agent may be the default."""
    write(tmp_path, "architect.yaml", {**GOOD, "default": True})
    second = write(
        tmp_path, "builder.yaml", {**GOOD, "id": "builder", "name": "B", "default": True}
    )
    with pytest.raises(AgentDefinitionError, match="more than one default") as caught:
        load_agents(tmp_path)
    assert (caught.value.path, caught.value.field) == (str(second), "default")


def test_no_agents(tmp_path):
    """An empty or missing folder is an error, not an empty team."""
    with pytest.raises(AgentDefinitionError, match="no agent definitions"):
        load_agents(tmp_path)
    with pytest.raises(AgentDefinitionError, match="not a folder"):
        load_agents(tmp_path / "missing")


def test_not_utf8(tmp_path):
    """A file that is not UTF-8 text is refused with its name."""
    (tmp_path / "architect.yaml").write_bytes(b"id: \xff\xfe\n")
    with pytest.raises(AgentDefinitionError, match=r"architect\.yaml: not UTF-8"):
        load_agents(tmp_path)


@pytest.mark.parametrize("agent_id", ["..", ".", "a/b", "", "x\0y", "/etc", "../x", "A", "a\n"])
def test_workspace_dir_rejects_escaping_ids(tmp_path, agent_id):
    """Ids that are not plain agent ids never become paths."""
    with pytest.raises(ValidationError):
        workspace_dir(tmp_path, agent_id)


def test_workspace_dir_rejects_symlink_escape(tmp_path):
    """A workspace that is a symbolic link out of the folder is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    (workspaces / "rogue").symlink_to(outside)
    with pytest.raises(ValidationError, match="outside"):
        workspace_dir(workspaces, "rogue")


def test_workspace_dir_and_identity(tmp_path):
    """A valid id maps to its folder; missing identity files read as empty text."""
    assert workspace_dir(tmp_path, "tester") == tmp_path / "tester"
    assert read_identity(tmp_path, "tester") == ("", "")
    (tmp_path / "tester").mkdir()
    (tmp_path / "tester" / "SOUL.md").write_text("Sceptical. 严谨。", encoding="utf-8")
    assert read_identity(tmp_path, "tester") == ("", "Sceptical. 严谨。")


_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=10,
)
_fields = st.sampled_from(
    [
        *("id", "name", "role", "model", "models", "temperature", "max_tokens"),
        *("max_concurrency", "default", "routing", "description", "rules", "keywords"),
        *("patterns", "agents"),
    ]
)
_small_ints = st.integers(min_value=-2, max_value=50)
_rule = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=8) | _values,
        "keywords": st.lists(st.text(max_size=8), max_size=3) | _values,
        "patterns": st.lists(st.text(max_size=8), max_size=3) | _values,
        "min_length": _small_ints | _values,
        "max_length": _small_ints | _values,
        "priority": _small_ints | _values,
        "agents": st.lists(st.sampled_from(["architect", "ghost"]), max_size=2) | _values,
    },
)
_documents = st.dictionaries(_fields | st.text(max_size=8), _values, max_size=6) | st.builds(
    lambda extra, rules: {**GOOD, **extra, "routing": {"rules": rules}},
    st.dictionaries(_fields, _values, max_size=1),
    st.lists(_rule, max_size=3),
)


@settings(
    max_examples=75,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=_documents)
def test_arbitrary_documents_only_raise_definition_errors(tmp_path, document):
    """Whatever mapping a file holds, loading it succeeds or raises AgentDefinitionError."""
    write(tmp_path, "architect.yaml", document)
    try:
        agents = load_agents(tmp_path)
    except AgentDefinitionError as exc:
        problem = str(exc)
    else:
        assert route("@architect hello there", agents).agents == ("architect",)
        assert route("anything at all", agents).agents == ("architect",)
        return
    assert "architect.yaml" in problem


def test_core_imports_no_services():
    """Importing routing and agents pulls in no service client library."""
    code = (
        "import sys, orchestrator.core.routing, orchestrator.core.agents; "
        "banned = ['redis', 'aiomqtt', 'rq', 'anthropic', 'sqlmodel', 'apscheduler']; "
        "print([m for m in sys.modules if m.split('.')[0] in banned])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"
