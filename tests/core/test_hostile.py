"""Hostile and bad input: posts, agent files, settings, templates, secrets and file writes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.adapters.mqtt import ping_mqtt
from orchestrator.adapters.probes import ping_redis
from orchestrator.cli.main import main
from orchestrator.cli.supervisor import describe
from orchestrator.core.agents import load_agents
from orchestrator.core.models import AGENT_ID_RE, GROUP_ID_RE, SENDER_RE
from orchestrator.core.prompts import Prompts
from orchestrator.core.wire import parse_inbound, validate_post
from orchestrator.errors import (
    AgentDefinitionError,
    ConfigError,
    OrchestratorError,
    TemplateError,
    ValidationError,
)
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.settings import Settings, env_name, load_settings

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "hunter2"
REDIS_WITH_PASSWORD = "redis://:hunter2-secret@127.0.0.1:1/0"
MQTT_WITH_PASSWORD = "mqtt://user:hunter2-secret@127.0.0.1:1"
API_KEY = "sk-ant-hunter2-secret"
FIELDS = ("group", "text", "sender")
GOOD_AGENT = {"id": "architect", "name": "Architect", "role": "architect", "model": "m"}

# Text that reaches every corner: controls, surrogates, line separators, CJK, NUL.
_any_text = st.text(st.characters(codec=None), max_size=80) | st.sampled_from(
    ["", " ", "..", ".", "/", "demo\n", "de\x00mo", "../etc", "Demo", "a" * 65, "\u2028", "é"]
)
_fixture_ok = settings(
    deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# Posts ------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, database=None)
@given(group=_any_text, text=_any_text, sender=_any_text, max_bytes=st.integers(1, 200))
def test_validate_post_accepts_or_names_the_field(group, text, sender, max_bytes):
    """Any three strings give a valid post or a ValidationError naming one of its fields."""
    try:
        post = validate_post(group, text, sender, max_bytes)
    except ValidationError as exc:
        assert exc.field in FIELDS  # noqa: PT017 - either outcome is valid
        assert str(exc).startswith(f"{exc.field}: ")  # noqa: PT017
    else:
        assert GROUP_ID_RE.match(post.group)
        assert SENDER_RE.match(post.sender)
        assert post.text.strip()
        assert len(post.text.encode("utf-8")) <= max_bytes


_raw_values = st.binary(max_size=60) | _any_text.map(
    lambda s: s.encode("utf-8", errors="surrogatepass")
)


@settings(max_examples=250, deadline=None, database=None)
@given(
    fields=st.dictionaries(
        st.sampled_from([b"group", b"text", b"sender", b"\xff", b"x"]) | st.binary(max_size=8),
        _raw_values,
        max_size=5,
    )
)
def test_parse_inbound_raw_bytes_raise_only_validation_errors(fields):
    """Any raw stream entry parses or raises a ValidationError, never anything else."""
    try:
        message = parse_inbound("5-0", fields, 64, NOW)
    except ValidationError as exc:
        assert str(exc).startswith(f"{exc.field}: ")  # noqa: PT017 - either outcome is valid
    else:
        assert GROUP_ID_RE.match(message.group)
        assert len(message.text.encode("utf-8")) <= 64


@pytest.mark.parametrize(
    ("group", "text", "sender", "field", "problem"),
    [
        ("demo", "x" * 65, "user", "text", "65 bytes; the limit is 64"),
        ("demo", "设" * 22, "user", "text", "66 bytes"),
        ("demo", "bell \x07", "user", "text", "control character 0x07"),
        ("demo", "nul \x00", "user", "text", "control character 0x00"),
        ("demo", "esc \x1b[31m", "user", "text", "control character 0x1b"),
        ("demo", "del \x7f", "user", "text", "control character 0x7f"),
        ("demo", "half \ud800", "user", "text", "not valid UTF-8"),
        ("demo", "c1 \x9b31m", "user", "text", "control character 0x9b"),
        ("demo", "file\u202egnp.exe", "user", "text", "bidirectional control character U+202E"),
        ("demo", "lre \u202a", "user", "text", "bidirectional control character U+202A"),
        ("demo", "iso \u2066x\u2069", "user", "text", "bidirectional control character U+2066"),
        ("demo", "pdi \u2069", "user", "text", "bidirectional control character U+2069"),
        ("..", "hi", "user", "group", "not a valid group id"),
        ("a/b", "hi", "user", "group", "not a valid group id"),
        ("de\x00mo", "hi", "user", "group", "not a valid group id"),
        ("demo\n", "hi", "user", "group", "not a valid group id"),
        ("Demo", "hi", "user", "group", "not a valid group id"),
        ("demo", "hi", "user\n", "sender", "not a valid sender"),
        ("demo", "hi", "../root", "sender", "not a valid sender"),
        ("demo", "hi", "a\x00b", "sender", "not a valid sender"),
    ],
)
def test_each_bad_post_gets_one_clear_error(group, text, sender, field, problem):
    """Oversized, control characters, bad ids: each refused with the field and the problem."""
    with pytest.raises(ValidationError) as caught:
        validate_post(group, text, sender, max_bytes=64)
    assert caught.value.field == field
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({b"group": b"demo", b"text": b"\xff\xfe"}, "text"),
        ({b"group": b"de\xffmo", b"text": b"hi"}, "group"),
        ({b"group": b"demo", b"text": b"hi", b"sender": b"\xc3"}, "sender"),
        ({b"group": b"demo", b"text": b"\xed\xa0\x80"}, "text"),  # an encoded surrogate
        ({b"group": b"demo", b"text": "a\u202eb".encode()}, "text"),  # a right-to-left override
        ({b"group": b"demo"}, "text"),
        ({b"text": b"hi"}, "group"),
        ({b"group": b"demo\n", b"text": b"hi"}, "group"),
        ({b"group": b"../x", b"text": b"hi"}, "group"),
    ],
)
def test_bad_raw_entries_name_the_field(raw, field):
    """Invalid UTF-8 and missing or bad fields in a raw entry are refused, naming the field."""
    with pytest.raises(ValidationError) as caught:
        parse_inbound("1-0", raw, 64, NOW)
    assert caught.value.field == field


def test_right_to_left_writing_is_accepted():
    """The marks right-to-left writing needs (RLM, LRM, ALM) are ordinary text on the wire."""
    text = "\u05e9\u05dc\u05d5\u05dd\u200f 1.0 \u200e \u0645\u0631\u062d\u0628\u0627\u061c"
    assert validate_post("demo", text, "user", max_bytes=256).text == text


# Agent files ------------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["1", "0.5", "yes", "", "256"])
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_scalars, inner),
    max_leaves=8,
)
_context_keys = st.sampled_from(
    ["window", "reserved_output", "identity", "summary", "memory_md", "logs", "recall", "other"]
)
_recall_keys = st.sampled_from(
    ["relevance_floor", "max_entries", "char_budget", "require_source", "exclude_untrusted", "x"]
)


@settings(_fixture_ok, max_examples=100)
@given(
    block=st.sampled_from(["context", "recall"]),
    keys=st.data(),
)
def test_context_and_recall_blocks_raise_only_definition_errors(tmp_path, block, keys):
    """Wrong types in the context: and recall: blocks raise AgentDefinitionError naming both."""
    key_strategy = _context_keys if block == "context" else _recall_keys
    value = keys.draw(st.dictionaries(key_strategy, _values, max_size=4) | _values)
    path = tmp_path / "architect.yaml"
    path.write_text(yaml.safe_dump({**GOOD_AGENT, block: value}), encoding="utf-8")
    try:
        (agent,) = load_agents(tmp_path)
    except AgentDefinitionError as exc:
        assert exc.path == str(path)  # noqa: PT017 - either outcome is valid
        assert exc.field.startswith(block)  # noqa: PT017
    else:
        assert set(getattr(agent, block)) <= set(value)


@pytest.mark.parametrize(
    ("block", "field", "problem"),
    [
        ({"context": "big"}, "context", "must be a mapping"),
        ({"context": [1, 2]}, "context", "must be a mapping"),
        ({"context": {"window": "200000"}}, "context.window", "valid integer"),
        ({"context": {"window": True}}, "context.window", "valid integer"),
        ({"context": {"window": 12.5}}, "context.window", "valid integer"),
        ({"context": {"window": 10}}, "context.window", "greater than or equal to 256"),
        ({"context": {"logs": -1}}, "context.logs", "greater than or equal to 0"),
        ({"context": {"windows": 1000}}, "context.windows", "unknown field"),
        ({"recall": "on"}, "recall", "must be a mapping"),
        ({"recall": {"relevance_floor": "high"}}, "recall.relevance_floor", "valid number"),
        ({"recall": {"relevance_floor": 1.5}}, "recall.relevance_floor", "less than or equal"),
        ({"recall": {"max_entries": 1000}}, "recall.max_entries", "less than or equal to 100"),
        ({"recall": {"require_source": "yes"}}, "recall.require_source", "valid boolean"),
        ({"recall": {"exclude_untrusted": 1}}, "recall.exclude_untrusted", "valid boolean"),
        ({"recall": {"char_budget": [1]}}, "recall.char_budget", "valid integer"),
    ],
)
def test_wrong_types_in_context_and_recall_name_file_and_field(tmp_path, block, field, problem):
    """Each wrong type in the newer blocks names the file and the dotted field."""
    path = tmp_path / "architect.yaml"
    path.write_text(yaml.safe_dump({**GOOD_AGENT, **block}), encoding="utf-8")
    with pytest.raises(AgentDefinitionError) as caught:
        load_agents(tmp_path)
    assert (caught.value.path, caught.value.field) == (str(path), field)
    assert problem in caught.value.problem


@settings(_fixture_ok, max_examples=150)
@given(text=st.text(st.characters(codec="utf-8"), max_size=120))
def test_arbitrary_yaml_text_raises_only_definition_errors(tmp_path, text):
    """Any text at all in an agent file loads or raises AgentDefinitionError naming the file."""
    path = tmp_path / "architect.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_agents(tmp_path)
    except AgentDefinitionError as exc:
        assert exc.path == str(path)  # noqa: PT017 - either outcome is valid


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['echo pwned']",
        "id: !!python/name:os.system\n",
        "id: &a [*a]\n",
        "a: &a [1, 2]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "context: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
        "? [a, b]\n: 1\n",
        "id: architect\nid: architect\n",
        "---\nid: a\n---\nid: b\n",
        "id: !!binary aGVsbG8=\nname: n\nrole: r\nmodel: m\n",
        "\ufeffid: architect\n",
        "\t- x\n",
    ],
)
def test_hostile_yaml_documents_are_refused_by_name(tmp_path, text):
    """Python tags, recursive and exploding aliases, odd keys: a clear error naming the file."""
    path = tmp_path / "architect.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AgentDefinitionError) as caught:
        load_agents(tmp_path)
    assert caught.value.path == str(path)


# Settings ---------------------------------------------------------------------------------------

_VARIABLES = sorted(
    {env_name(name) for name in Settings.model_fields}
    | {f"ARENA_{name}" for name in ("REDIS_URL", "MQTT_URL", "DATABASE_URL")}
)
_env_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40
) | st.sampled_from(
    ["-1", "0", "1e309", "nan", "inf", "99999999999999999999", "America", "Etc", "true", " 5 "]
)


def _accepted_names(variable: str) -> set[str]:
    # ``ARENA_REDIS_URL`` is another spelling of ``REDIS_URL``: either name is clear.
    return {variable, variable.removeprefix("ARENA_")}


@settings(max_examples=250, deadline=None, database=None)
@given(variable=st.sampled_from(_VARIABLES), value=_env_text)
def test_any_value_of_any_variable_loads_or_names_it(variable, value):
    """Any string in any setting loads or raises ConfigError naming that variable."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(variable, value)
        try:
            loaded = load_settings()
        except ConfigError as exc:
            assert exc.setting in _accepted_names(variable)  # noqa: PT017 - either outcome
            assert str(exc).startswith(f"{exc.setting}: ")  # noqa: PT017
        else:
            ZoneInfo(loaded.tz)


@pytest.mark.parametrize("zone", ["America", "Etc", "", "../../etc/passwd", "UTC\n"])
def test_time_zone_folders_and_paths_are_not_zones(monkeypatch, zone):
    """A folder of the zone database or a path is an unknown zone, not a traceback."""
    monkeypatch.setenv("ARENA_TZ", zone)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == "ARENA_TZ"


# Templates --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _template_folder(templates: dict[str, str]) -> Iterator[Path]:
    # Hypothesis runs many examples per test: each gets a fresh folder of its own.
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for file_name, source in templates.items():
            (folder / file_name).write_text(source, encoding="utf-8")
        yield folder


@given(name=st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True).map(lambda s: f"v_{s}"))
@settings(max_examples=100, deadline=None, database=None)
def test_undefined_template_variable_names_template_and_variable(name):
    """Rendering a template that uses an undefined name names the template and the name."""
    with _template_folder({"turn.md.j2": f"Hello {{{{ {name} }}}}\n"}) as folder:
        with pytest.raises(TemplateError) as caught:
            Prompts(folder).render("turn.md.j2", known="x")
        assert caught.value.template == "turn.md.j2"
        assert name in caught.value.problem
        assert "undefined" in caught.value.problem


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        ("{{ agent.nickname }}", "nickname"),
        ("{% for m in messages %}{{ m }}{% endfor %}", "messages"),
        ("{{ known }} and {{ other | upper }}", "other"),
        ("{% if ghost %}x{% endif %}", "ghost"),
    ],
)
def test_undefined_names_in_expressions_are_named(tmp_path, source, missing):
    """Attributes, loops, filters and conditions on undefined names all name the name."""
    (tmp_path / "system.md.j2").write_text(source, encoding="utf-8")
    with pytest.raises(TemplateError) as caught:
        Prompts(tmp_path).render("system.md.j2", known="x", agent={"id": "a"})
    assert caught.value.template == "system.md.j2"
    assert missing in caught.value.problem


# Secrets ----------------------------------------------------------------------------------------


@pytest.fixture
def secret_env(monkeypatch, tmp_path):
    """Passwords in both URLs and an API key, everything else under tmp_path."""
    monkeypatch.setenv("REDIS_URL", REDIS_WITH_PASSWORD)
    monkeypatch.setenv("MQTT_URL", MQTT_WITH_PASSWORD)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ARENA_AGENTS_DIR", str(REPO / "agents"))
    monkeypatch.setenv("ARENA_PROMPTS_DIR", str(REPO / "prompts"))
    monkeypatch.setenv("ARENA_WORKSPACES_DIR", str(tmp_path / "workspaces"))


def _everything(result) -> str:
    text = result.stdout + result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        text += "".join(traceback.format_exception(result.exception))
    return text


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "--json"],
        ["check"],
        ["post", "demo", "hi"],
        ["post", "demo", "hi", "--wait", "0.1"],
        ["tail", "demo"],
        ["history", "demo"],
        ["dead-letters"],
        ["worker", "--burst"],
    ],
)
def test_commands_never_show_secrets(secret_env, args):
    """With passwords in the URLs and an API key set, no command prints any of them."""
    result = CliRunner().invoke(main, args)
    output = _everything(result)
    assert SECRET not in output
    assert "Traceback" not in output
    assert isinstance(result.exception, SystemExit | None)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REDIS_URL", "redis://:hunter2@h:abc/0"),
        ("REDIS_URL", "redis://:hunter2@[::1/0"),
        ("REDIS_URL", "redis://:hunter2@127.0.0.1:1/0?socket_timeout=x"),
        ("REDIS_URL", "redis://:hunter2@127.0.0.1:99999/0"),
        ("MQTT_URL", "mqtt://u:hunter2@[::1"),
        ("MQTT_URL", "mqtt://u:hunter2@h:abc"),
    ],
)
@pytest.mark.parametrize("args", [["check"], ["status"], ["post", "demo", "hi"]])
def test_malformed_service_urls_fail_cleanly(secret_env, monkeypatch, variable, value, args):
    """A malformed URL gives a clear error naming the variable, no traceback, no password."""
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(main, args)
    output = _everything(result)
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert SECRET not in output
    if args == ["check"] or variable == "REDIS_URL":
        assert variable in output


def test_describe_and_repr_hide_secrets(secret_env):
    """`arena up`'s description of the services and the settings' repr hide every secret."""
    loaded = load_settings()
    assert SECRET not in repr(loaded)
    assert SECRET not in str(loaded)
    lines = describe(loaded)
    assert SECRET not in repr(lines)
    assert dict(lines)["redis"] == "redis://:***@127.0.0.1:1/0"
    assert dict(lines)["mqtt"] == "mqtt://user:***@127.0.0.1:1"


def test_describe_hides_a_database_password(monkeypatch):
    """A password in DATABASE_URL is hidden too, even one containing '@' and ':'."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://arena:hunter2:@x@db:5432/arena")
    assert SECRET not in repr(describe(load_settings()))


def test_describe_names_the_embedded_services_plainly(tmp_path):
    """With no URLs set, `arena up` says which embedded services it starts, as written."""
    lines = dict(describe(load_settings(data_dir=tmp_path)))
    assert lines["redis"] == (
        "embedded redis-server, redis://127.0.0.1:6379/0"
        f" (and unix socket {tmp_path / 'redis.sock'})"
    )
    no_port = dict(describe(load_settings(data_dir=tmp_path, redis_port=0)))
    assert no_port["redis"] == f"embedded redis-server, unix socket {tmp_path / 'redis.sock'}"
    assert lines["mqtt"] == "embedded broker, mqtt://127.0.0.1:1883"
    assert lines["database"] == f"SQLite {tmp_path.resolve() / 'arena.db'}"


def _records_text(caplog) -> str:
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        if record.exc_info:
            parts.append("".join(traceback.format_exception(*record.exc_info)))
    return "\n".join(parts)


@pytest.mark.parametrize(
    "url",
    [
        REDIS_WITH_PASSWORD,
        "rediss://:hunter2-secret@127.0.0.1:1/0",
        "redis://default:hunter2-secret@127.0.0.1:1/0",
        "redis://:hunter2%2Dsecret@127.0.0.1:1/0",
    ],
)
def test_failing_redis_ping_logs_and_raises_no_secret(caplog, url):
    """A failed Redis ping leaks the password neither in the error nor in any log record."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OrchestratorError) as caught:
        asyncio.run(ping_redis(url, timeout_s=2))
    assert SECRET not in str(caught.value)
    assert SECRET not in _records_text(caplog)


@pytest.mark.parametrize(
    "url",
    [MQTT_WITH_PASSWORD, "mqtts://user:hunter2-secret@127.0.0.1:1", "mqtt://hunter2@127.0.0.1:1"],
)
def test_failing_mqtt_ping_logs_and_raises_no_secret(caplog, url):
    """A failed MQTT ping leaks the credentials neither in the error nor in any log record."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OrchestratorError) as caught:
        asyncio.run(ping_mqtt(url, timeout_s=2))
    assert SECRET not in str(caught.value)
    assert SECRET not in _records_text(caplog)


def test_rejected_redis_password_is_not_repeated(caplog, embedded_redis_url):
    """A Redis that rejects the password says so without repeating it."""
    caplog.set_level(logging.DEBUG)
    url = embedded_redis_url.replace("redis://", "redis://someone:hunter2-secret@", 1)
    with pytest.raises(OrchestratorError) as caught:
        asyncio.run(ping_redis(url, timeout_s=2))
    assert SECRET not in str(caught.value)
    assert SECRET not in _records_text(caplog)


# Workspace confinement --------------------------------------------------------------------------


def _files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if not p.is_dir()}


@pytest.mark.parametrize("agent_id", ["../x", "a/b", "", ".", "..", "x\x00", "/etc", "x\n", "X"])
def test_escaping_agent_ids_write_nothing(tmp_path, agent_id):
    """An agent id that could leave its workspace is refused and nothing is written anywhere."""
    workspaces = tmp_path / "workspaces"
    log = PersonalLog(workspaces, ZoneInfo("UTC"))
    with pytest.raises(ValidationError) as caught:
        log.append(agent_id, PersonalDraft(content="x"), source="g/m", now=NOW)
    assert caught.value.field == "agent_id"
    assert _files_under(tmp_path) == set()


@settings(_fixture_ok, max_examples=250)
@given(agent_id=_any_text)
def test_personal_log_writes_only_inside_the_workspace(tmp_path, agent_id):
    """For any id, a note lands in that agent's memory folder or is refused, never elsewhere."""
    root = tmp_path / "case"
    workspaces = root / "workspaces"
    log = PersonalLog(workspaces, ZoneInfo("UTC"))
    try:
        path = log.append(agent_id, PersonalDraft(content="x"), source="g/m", now=NOW)
    except ValidationError as exc:
        assert exc.field == "agent_id"  # noqa: PT017 - either outcome is valid
        assert _files_under(root) == set()
    else:
        assert AGENT_ID_RE.fullmatch(agent_id)
        assert path.resolve().parent == (workspaces / agent_id / "memory").resolve()
        assert all(p.is_relative_to(workspaces / agent_id) for p in _files_under(root))
    finally:
        for entry in sorted(root.rglob("*"), reverse=True):
            entry.rmdir() if entry.is_dir() else entry.unlink()


def test_symlinked_memory_folder_is_never_written_through(tmp_path):
    """A memory/ folder that is a symbolic link out of the workspace is not written through."""
    workspaces = tmp_path / "workspaces"
    (workspaces / "dev").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspaces / "dev" / "memory").symlink_to(outside)
    log = PersonalLog(workspaces, ZoneInfo("UTC"))
    with contextlib.suppress(ValidationError, OSError):
        log.append("dev", PersonalDraft(content="x"), source="g/m", now=NOW)
    assert os.listdir(outside) == []
