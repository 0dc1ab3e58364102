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
