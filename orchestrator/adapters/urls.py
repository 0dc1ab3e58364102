"""Service URLs: checking the TLS files a URL names, and writing addresses for people (an
MQTT URL is read for the client by :mod:`orchestrator.adapters.mqtt`).

Configured services may need credentials and TLS, given in the URLs: ``redis://user:pass@…``,
``rediss://…?ssl_ca_certs=/path/ca.pem``, ``mqtts://user:pass@…?ssl_ca_certs=/path/ca.pem``.
Messages for people name host and port only (:func:`redact_url` for a whole URL).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from orchestrator.errors import ConfigError

__all__ = ["TLS_FILE_OPTIONS", "check_tls_files", "display_path", "redact_url"]

# URL query options naming TLS files, as redis-py reads them; MQTT URLs take the same names.
TLS_FILE_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


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
        if name in TLS_FILE_OPTIONS and not Path(value).is_file():
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
