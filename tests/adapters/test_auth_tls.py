"""Redis and MQTT with passwords and TLS, through the URLs; secrets never shown to people.

The servers (``secured_servers`` in conftest) are Debian's ``redis-server`` with a password and
an ACL user, and on a TLS-only port; and ``mosquitto`` with a password file, and on a TLS
listener that requires a client certificate. Certificates come from a throwaway authority.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import signal
import urllib.parse
from pathlib import Path

import aiomqtt
import pytest
from click.testing import CliRunner, Result

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.wire import group_topic
from orchestrator.errors import BusError, ConfigError
from tests.arena_helpers import REPO, agent_of, make_settings, running_daemon, write_team
from tests.conftest import SecuredServers
from tests.fakes import FakeMessagesServer

# Assembled so that the file itself does not look like it holds a key.
API_KEY = "sk-" + "ant-test-" + "K3yN0tF0rL0gs7731"
DB_PASSWORD = "Db-s3cret-4410"


def _secrets(servers: SecuredServers) -> list[str]:
    """Every secret the tests configure, as written and as percent-encoded in URLs."""
    plain = [servers.password, servers.user_password, DB_PASSWORD, API_KEY]
    return plain + [urllib.parse.quote(s, safe="") for s in plain]


def _assert_no_secret(text: str, servers: SecuredServers) -> None:
    for secret in _secrets(servers):
        assert secret not in text, f"a secret leaked: {text!r}"


def _use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> None:
    """Point the `arena` command at a test team under ``tmp_path`` and the given services."""
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ARENA_AGENTS_DIR", str(write_team(tmp_path)))
    monkeypatch.setenv("ARENA_WORKSPACES_DIR", str(tmp_path / "ws"))
    monkeypatch.setenv("ARENA_PROMPTS_DIR", str(REPO / "prompts"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _arena(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _assert_one_clear_error(result: Result, expected: str) -> None:
    """Exit code 1 with a line on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert expected in result.stderr, result.stderr


def _redis_url(servers: SecuredServers, kind: str) -> str:
    return {
        "password": servers.redis_url(),
        "acl-user": servers.redis_acl_url(),
        "tls": servers.rediss_url(),
    }[kind]


def _mqtt_url(servers: SecuredServers, kind: str) -> str:
    return {"password": servers.mqtt_url(), "tls": servers.mqtts_url()}[kind]


# Working end to end --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("redis_kind", "mqtt_kind"), [("password", "password"), ("acl-user", "tls"), ("tls", "tls")]
)
async def test_daemon_answers_through_secured_redis_and_mqtt(
    tmp_path: Path,
    secured_servers: SecuredServers,
    fake_llm: FakeMessagesServer,
    redis_kind: str,
    mqtt_kind: str,
    unique_name: str,
):
    """A message posted with ArenaClient is answered on Redis and announced on MQTT, both
    reached with credentials (and TLS) given only in the URLs."""
    fake_llm.reply_fn = lambda request: f"hello from {agent_of(request)}"
    redis_url = _redis_url(secured_servers, redis_kind)
    mqtt_url = _mqtt_url(secured_servers, mqtt_kind)
    group = unique_name
    settings = make_settings(tmp_path, redis_url, mqtt_url, fake_llm.base_url)
    events: list[dict[str, str]] = []
    async with (
        aiomqtt.Client(**mqtt_client_args(mqtt_url)) as mqtt,
        running_daemon(settings),
    ):
        await mqtt.subscribe(group_topic(group), qos=1)
        with ArenaClient(redis_url) as client:
            message_id, replies = await asyncio.to_thread(
                client.post_and_wait, group, "@ping hello", "alex", 20
            )
        async with asyncio.timeout(10):
            async for event in mqtt.messages:
                assert isinstance(event.payload, bytes)
                events.append(json.loads(event.payload))
                if events[-1]["type"] == "done":
                    break
    assert [(r.sender, r.text) for r in replies] == [("ping", "hello from ping")]
    assert [(e["type"], e["in_reply_to"]) for e in events] == [
        ("reply", message_id),
        ("done", message_id),
    ]


def test_check_passes_over_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secured_servers: SecuredServers
):
    """`arena check` reaches Redis and the broker over TLS with a password and a client
    certificate (the broker requires one), all named in the URLs."""
    _use(
        monkeypatch,
        tmp_path,
        REDIS_URL=secured_servers.rediss_url(),
        MQTT_URL=secured_servers.mqtts_url(),
    )
    result = _arena("check")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split()[:3] == ["ok", "redis", "reachable"] for line in lines), lines
    assert any(line.split()[:3] == ["ok", "mqtt", "reachable"] for line in lines), lines


# One clear error -----------------------------------------------------------------------------


def test_wrong_passwords_fail_check_with_one_line_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secured_servers: SecuredServers
):
    """A wrong Redis password and a wrong broker password each fail their own check line."""
    _use(
        monkeypatch,
        tmp_path,
        REDIS_URL=secured_servers.redis_url(password="wrong-one"),
        MQTT_URL=secured_servers.mqtt_url(password="wrong-one"),
    )
    result = _arena("check")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    failed = {line.split()[1]: line for line in result.output.splitlines() if "FAIL" in line}
    assert set(failed) == {"redis", "mqtt"}, result.output
    assert "rejected the credentials" in failed["redis"]
    assert "refused the connection" in failed["mqtt"]
    assert "Not authorized" in failed["mqtt"]


@pytest.mark.parametrize(
    ("password", "expected"),
    [("wrong-one", "rejected the credentials"), ("", "requires a password")],
)
def test_post_with_a_bad_password_is_one_clear_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    secured_servers: SecuredServers,
    password: str,
    expected: str,
):
    """`arena post` with a wrong or missing password says so in one line on stderr."""
    _use(monkeypatch, tmp_path, REDIS_URL=secured_servers.redis_url(password=password))
    result = _arena("post", "demo", "hello")
    _assert_one_clear_error(result, f"Redis at 127.0.0.1:{secured_servers.redis_port} {expected}")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# paho-mqtt (2.2) leaves the socket of a failed TLS handshake for the garbage collector.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_untrusted_certificates_are_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secured_servers: SecuredServers
):
    """Without the authority in the URLs, both checks fail naming TLS and `ssl_ca_certs`."""
    _use(
        monkeypatch,
        tmp_path,
        REDIS_URL=secured_servers.rediss_url().partition("?")[0],
        MQTT_URL=secured_servers.mqtts_url().partition("?")[0],
    )
    result = _arena("check")
    assert result.exit_code == 1
    failed = {line.split()[1]: line for line in result.output.splitlines() if "FAIL" in line}
    assert set(failed) == {"redis", "mqtt"}, result.output
    for line in failed.values():
        assert "TLS: the server's certificate is not trusted" in line
        assert "ssl_ca_certs" in line
    gc.collect()  # here, where the warning about paho's socket is ignored


def test_a_missing_certificate_file_is_a_setting_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secured_servers: SecuredServers
):
    """A CA file that does not exist is named, before any connection is tried."""
    missing = tmp_path / "nowhere" / "ca.pem"
    url = f"{secured_servers.rediss_url().partition('?')[0]}?ssl_ca_certs={missing}"
    with pytest.raises(ConfigError, match=re.escape(f"ssl_ca_certs: no file at {missing}")):
        ArenaClient(url)
    _use(monkeypatch, tmp_path, REDIS_URL=url)
    _assert_one_clear_error(_arena("post", "demo", "hello"), "REDIS_URL: ssl_ca_certs: no file")


def test_client_error_names_the_server_not_the_password(secured_servers: SecuredServers):
    """ArenaClient's errors carry host and port, never the credentials."""
    with (
        ArenaClient(secured_servers.redis_url(password="wrong-" + API_KEY)) as client,
        pytest.raises(BusError, match="rejected the credentials") as caught,
    ):
        client.post("demo", "hello")
    assert API_KEY not in str(caught.value)
    assert caught.value.hint == "check the user name and password in REDIS_URL"


# Secrets never shown -------------------------------------------------------------------------


def _team_env(tmp_path: Path) -> dict[str, str]:
    return {
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
        "ARENA_WORKSPACES_DIR": str(tmp_path / "ws"),
        "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
    }


def test_commands_never_show_secrets(
    tmp_path: Path,
    secured_servers: SecuredServers,
    free_port: int,
    caplog: pytest.LogCaptureFixture,
):
    """`arena check`, `status` and `post` print and log no password or key, whether the
    credentials are right, wrong, or the servers unreachable."""
    caplog.set_level(logging.DEBUG)
    right = _team_env(tmp_path) | {
        "REDIS_URL": secured_servers.rediss_url(),
        "MQTT_URL": secured_servers.mqtts_url(),
        "ANTHROPIC_API_KEY": API_KEY,
    }
    wrong = right | {
        "REDIS_URL": secured_servers.redis_url(password=secured_servers.user_password),
        "MQTT_URL": secured_servers.mqtt_url(password=secured_servers.user_password),
        "DATABASE_URL": f"postgresql://arena:{DB_PASSWORD}@127.0.0.1:{free_port}/arena",
    }
    credentials = f"{secured_servers.user}:{secured_servers.quoted_password}@127.0.0.1"
    dead = right | {
        "REDIS_URL": f"redis://{credentials}:{free_port}/0",
        "MQTT_URL": f"mqtt://{credentials}:{free_port}",
    }
    commands = {
        "check": (right, ["check"]),
        "status": (right, ["status", "--json"]),
        "post": (right, ["post", "demo", "hello"]),
        "check, wrong": (wrong, ["check"]),
        "status, wrong": (wrong, ["status"]),
        "post, wrong": (wrong, ["post", "demo", "hello"]),
        "post, unreachable": (dead, ["post", "demo", "hello"]),
    }
    runs = {name: CliRunner().invoke(main, args, env=env) for name, (env, args) in commands.items()}
    assert {name: run.exit_code for name, run in runs.items()} == {
        name: 1 if "," in name else 0 for name in runs
    }
    for name, run in runs.items():
        assert not isinstance(run.exception, Exception), (name, run.exception)
        _assert_no_secret(run.output, secured_servers)
    _assert_no_secret(caplog.text, secured_servers)
    # What the commands said, to show the checks above looked at real messages.
    assert "rejected the credentials" in runs["post, wrong"].stderr
    assert "rejected the credentials" in runs["status, wrong"].stderr
    assert "cannot open 127.0.0.1" in runs["check, wrong"].output
    assert f"cannot reach Redis at 127.0.0.1:{free_port}" in runs["post, unreachable"].stderr


def test_worker_logs_never_show_secrets(tmp_path: Path, secured_servers: SecuredServers):
    """`arena worker --burst` logging at DEBUG to stderr shows no password or key."""
    env = _team_env(tmp_path) | {
        "REDIS_URL": secured_servers.rediss_url(),
        "MQTT_URL": secured_servers.mqtts_url(),
        "ANTHROPIC_API_KEY": API_KEY,
        "ARENA_LOG_LEVEL": "DEBUG",
    }
    # The worker runs in this process; RQ sets its own SIGINT and SIGTERM handlers for it.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run = CliRunner().invoke(main, ["worker", "--burst"], env=env)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert run.exit_code == 0, run.output
    assert "DEBUG" in run.stderr  # it did log
    _assert_no_secret(run.output, secured_servers)


async def test_daemon_logs_never_show_secrets(
    tmp_path: Path,
    secured_servers: SecuredServers,
    fake_llm: FakeMessagesServer,
    caplog: pytest.LogCaptureFixture,
    unique_name: str,
):
    """Every log record of a daemon answering a message, at DEBUG, with a broker refusing its
    password, holds no password or key; the refusal is one WARNING that names the broker."""
    caplog.set_level(logging.DEBUG)
    settings = make_settings(
        tmp_path,
        secured_servers.rediss_url(),
        secured_servers.mqtt_url(password=secured_servers.user_password),
        fake_llm.base_url,
        anthropic_api_key=API_KEY,
    )
    async with running_daemon(settings):
        with ArenaClient(settings.effective_redis_url) as client:
            _, replies = await asyncio.to_thread(
                client.post_and_wait, unique_name, "@ping hello", "alex", 20
            )
    assert [r.sender for r in replies] == ["ping"]
    assert fake_llm.requests, "the model was called"
    refusals = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "refused the connection" in r.getMessage()
    ]
    assert refusals == [
        f"mqtt broker at 127.0.0.1:{secured_servers.mqtt_port} refused the connection "
        "([code:135] Not authorized); check MQTT_URL"
    ]
    _assert_no_secret("\n".join(r.getMessage() for r in caplog.records), secured_servers)
    _assert_no_secret(caplog.text, secured_servers)
