"""Settings: defaults that run, conventional names, one clear error per bad value."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.settings import load_settings


def test_defaults_are_embedded_services(tmp_path, monkeypatch):
    """With nothing set, Redis is the socket under the data folder and SQLite the database."""
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.redis_url is None
    assert settings.mqtt_url is None
    assert settings.effective_redis_url == f"unix://{tmp_path / 'redis.sock'}"
    assert settings.effective_database_url == f"sqlite:///{tmp_path / 'arena.db'}"
    assert settings.anthropic_api_key is None


def test_conventional_names_and_empty_values(monkeypatch):
    """REDIS_URL and friends are read; an empty API key means none."""
    monkeypatch.setenv("REDIS_URL", "redis://example:6380/1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    settings = load_settings()
    assert settings.effective_redis_url == "redis://example:6380/1"
    assert settings.anthropic_api_key is None


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ARENA_TZ", "Nowhere/City", "ARENA_TZ: unknown time zone"),
        ("REDIS_URL", "http://x", "REDIS_URL: must start with redis://"),
        ("MQTT_URL", "tcp://x", "MQTT_URL: must start with mqtt://"),
        ("ARENA_MQTT_PORT", "70000", "ARENA_MQTT_PORT:"),
        ("ARENA_HOP_LIMIT", "zero", "ARENA_HOP_LIMIT:"),
        ("ARENA_LOG_LEVEL", "LOUD", "ARENA_LOG_LEVEL: must be DEBUG"),
    ],
)
def test_bad_values_name_the_variable(monkeypatch, name, value, message):
    """Each bad value raises ConfigError naming its environment variable."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(message)


def test_secret_never_shows_in_repr(monkeypatch):
    """The API key is a secret: not in the settings' repr."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-very-secret")
    settings = load_settings()
    assert "sk-very-secret" not in repr(settings)


def test_embedded_redis_listens_on_loopback_port_6379_by_default(tmp_path, monkeypatch):
    """People reach the embedded Redis at redis://127.0.0.1:6379/0; the daemon uses the socket."""
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.redis_port == 6379
    assert settings.public_redis_url == "redis://127.0.0.1:6379/0"
    assert settings.effective_redis_url == f"unix://{tmp_path / 'redis.sock'}"


def test_redis_port_zero_means_the_socket_only(tmp_path, monkeypatch):
    """ARENA_REDIS_PORT=0: the public URL is the unix socket."""
    monkeypatch.setenv("ARENA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ARENA_REDIS_PORT", "0")
    settings = load_settings()
    assert settings.public_redis_url == f"unix://{tmp_path / 'redis.sock'}"


def test_configured_redis_is_the_public_url(monkeypatch):
    """With REDIS_URL set, people use it too."""
    monkeypatch.setenv("REDIS_URL", "redis://example:6380/1")
    monkeypatch.setenv("ARENA_REDIS_PORT", "7000")
    assert load_settings().public_redis_url == "redis://example:6380/1"


def test_bad_redis_port_names_the_variable(monkeypatch):
    """A port out of range is one line naming ARENA_REDIS_PORT."""
    monkeypatch.setenv("ARENA_REDIS_PORT", "70000")
    with pytest.raises(ConfigError, match=r"^ARENA_REDIS_PORT:"):
        load_settings()
