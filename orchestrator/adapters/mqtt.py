"""MQTT for our clients: reading an ``mqtt(s)://`` URL into what ``aiomqtt.Client`` takes,
and the broker's health probe (``arena check``).

Apart from :mod:`orchestrator.adapters.urls` and the Redis probe so that what talks to Redis
alone does not import the MQTT client. Messages name host and port only, never the
credentials.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import aiomqtt

from orchestrator.adapters.probes import START_HINT, TLS_HINT, reason, scrub
from orchestrator.adapters.urls import TLS_FILE_OPTIONS, check_tls_files
from orchestrator.errors import ConfigError, ServiceError

__all__ = ["MqttAddress", "mqtt_address", "mqtt_client_args", "ping_mqtt"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttAddress:
    """Where an MQTT broker is and how to log in, as an ``mqtt(s)://`` URL gives it."""

    hostname: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls_params: aiomqtt.TLSParameters | None = None

    def __post_init__(self) -> None:
        if not self.hostname:
            raise ValueError("an MQTT address needs a host name")
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} is not from 1 to 65535")

    @property
    def where(self) -> str:
        """``host:port``, for messages (never the credentials)."""
        return f"{self.hostname}:{self.port}"

    def client_args(self) -> dict[str, Any]:
        """Keyword arguments for ``aiomqtt.Client``."""
        return {
            "hostname": self.hostname,
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "tls_params": self.tls_params,
        }


def mqtt_address(url: str) -> MqttAddress:
    """Read an ``mqtt://`` or ``mqtts://`` URL.

    ``mqtt://user:password@host:port``; the port defaults to 1883 (8883 for ``mqtts``, which
    also turns on TLS with the system's certificate authorities). An ``mqtts`` URL may name
    files as redis-py's URLs do: ``?ssl_ca_certs=/path/ca.pem`` (the authorities to trust) and
    ``&ssl_certfile=/path/cert.pem&ssl_keyfile=/path/key.pem`` (a client certificate).

    Raises:
        ConfigError: the URL has another scheme, no host, a bad port, an unknown option, or
            names a file that does not exist.
    """
    parts, port = _split_mqtt_url(url)
    tls = parts.scheme == "mqtts"
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(TLS_FILE_OPTIONS))
    if unknown:
        known = ", ".join(TLS_FILE_OPTIONS)
        raise ConfigError("MQTT_URL", f"unknown option {unknown[0]!r} (known: {known})")
    if options and not tls:
        raise ConfigError("MQTT_URL", f"{next(iter(options))} needs an mqtts:// URL")
    check_tls_files("MQTT_URL", url)
    return MqttAddress(
        hostname=parts.hostname or "",
        port=port or (8883 if tls else 1883),
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls_params=aiomqtt.TLSParameters(
            ca_certs=options.get("ssl_ca_certs"),
            certfile=options.get("ssl_certfile"),
            keyfile=options.get("ssl_keyfile"),
        )
        if tls
        else None,
    )


def mqtt_client_args(url: str) -> dict[str, Any]:
    """Keyword arguments for ``aiomqtt.Client`` from an ``mqtt://`` or ``mqtts://`` URL.

    Raises:
        ConfigError: as :func:`mqtt_address`.
    """
    return mqtt_address(url).client_args()


def _split_mqtt_url(url: str) -> tuple[SplitResult, int | None]:
    """The URL's parts and port, once scheme, port and host are known to be sound."""
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
    return parts, port


async def ping_mqtt(url: str, timeout_s: float) -> None:
    """Connect to the broker at ``url`` and disconnect.

    Raises:
        ServiceError: the broker is unreachable, silent or refuses the connection. The message
            names host and port only, never the credentials.
    """
    address = mqtt_address(url)
    try:
        async with (
            asyncio.timeout(timeout_s),
            aiomqtt.Client(**address.client_args(), timeout=timeout_s),
        ):
            pass
    except aiomqtt.MqttCodeError as exc:
        problem = f"the MQTT broker at {address.where} refused the connection: {exc}"
        hint = "check the user name and password in MQTT_URL"
        raise ServiceError("mqtt", scrub(problem, address.password), hint) from exc
    except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
        why = reason(exc, timeout_s)
        problem = f"cannot reach the MQTT broker at {address.where}: {why}"
        hint = TLS_HINT if why.startswith("TLS") else START_HINT
        raise ServiceError(
            "mqtt", scrub(problem, address.password), hint.format(name="MQTT_URL")
        ) from exc
