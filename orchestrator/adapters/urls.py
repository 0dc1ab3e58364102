"""Service URLs: reading an MQTT URL for the client, checking the TLS files a URL names, and
writing addresses for people.

Configured services may need credentials and TLS, given in the URLs: ``redis://user:pass@…``,
``rediss://…?ssl_ca_certs=/path/ca.pem``, ``mqtts://user:pass@…?ssl_ca_certs=/path/ca.pem``.
Messages for people name host and port only (:func:`redact_url` for a whole URL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import aiomqtt

from orchestrator.errors import ConfigError

__all__ = [
    "MqttAddress",
    "check_tls_files",
    "display_path",
    "mqtt_address",
    "mqtt_client_args",
    "redact_url",
]

# URL query options naming TLS files, as redis-py reads them; MQTT URLs take the same names.
_TLS_FILE_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


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
    unknown = sorted(set(options) - set(_TLS_FILE_OPTIONS))
    if unknown:
        known = ", ".join(_TLS_FILE_OPTIONS)
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


def display_path(path: Path) -> str:
    """``path`` relative to the working folder when it lies below it (a socket, for people)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
