"""Health probes: is the configured Redis there and willing to talk to us?

:func:`ping_redis` backs ``arena check`` and every command's start; :func:`redis_problem`
says what went wrong talking to Redis, for people; :func:`reason` and :func:`scrub` word a
failure for both probes (the MQTT broker's is in :mod:`orchestrator.adapters.mqtt`, apart so
that commands talking to Redis alone do not import the MQTT client). Messages name the socket
or host and port only, never the credentials.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio

from orchestrator.adapters.urls import check_tls_files, display_path
from orchestrator.errors import ConfigError, ServiceError

__all__ = [
    "START_HINT",
    "START_REDIS_HINT",
    "TLS_HINT",
    "ping_redis",
    "reason",
    "redis_problem",
    "scrub",
]

START_HINT = "start the daemon with `arena up` (or `make run`), or set {name}"
START_REDIS_HINT = START_HINT.format(name="REDIS_URL")
"""The hint of a Redis on a unix socket, or an embedded one, that does not answer."""
TLS_HINT = "name the authority that signed the server's certificate: {name}=…?ssl_ca_certs=PATH"


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
        problem = f"no Redis is listening at {display_path(socket_path)}"
        raise ServiceError("redis", problem, START_REDIS_HINT)
    try:
        client = redis.asyncio.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
    except ValueError as exc:  # redis-py's own checks, e.g. of query arguments
        raise ConfigError("REDIS_URL", scrub(f"not a valid Redis URL: {exc}", password)) from None
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
        where = display_path(Path(unquote(parts.path)))
        unreachable = f"no Redis is listening at {where}"
        hint = START_REDIS_HINT
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
    why = reason(exc, timeout_s)
    if why.startswith("TLS"):
        hint = TLS_HINT.format(name="REDIS_URL")
    return scrub(f"{unreachable}: {why}", password), hint


def reason(exc: BaseException, timeout_s: float) -> str:
    """Why talking to a service failed, in a few words (the socket error, TLS, a timeout)."""
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


def scrub(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` (a password) replaced by ``***``."""
    # Foreign error texts are not ours to trust: make sure no password slips through.
    return text.replace(secret, "***") if secret else text
