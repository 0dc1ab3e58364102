"""Configuration: one typed object, read from the environment once, in ``cli.py``."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from orchestrator.errors import ConfigError

__all__ = [
    "MAX_TOKENS_PER_DAY",
    "MAX_USD_PER_DAY",
    "ModelPrice",
    "Settings",
    "env_name",
    "load_settings",
    "priced",
]

# The largest daily caps accepted (the same bounds hold for an agent's own ``caps``).
MAX_TOKENS_PER_DAY = 10**12
MAX_USD_PER_DAY = 10**9


MAX_PRICE = 10**6  # US dollars per million tokens


class ModelPrice(BaseModel):
    """One model's price in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    output: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    cache_read: float = Field(default=0.0, ge=0, le=MAX_PRICE, allow_inf_nan=False)
    cache_write: float = Field(default=0.0, ge=0, le=MAX_PRICE, allow_inf_nan=False)


# Anthropic's list prices of the models agents/*.yaml name; "offline" costs nothing.
_DEFAULT_PRICES = {
    "claude-opus-4-1": ModelPrice(input=15, output=75, cache_read=1.5, cache_write=18.75),
    "claude-sonnet-4-5": ModelPrice(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-haiku-4-5": ModelPrice(input=1, output=5, cache_read=0.1, cache_write=1.25),
    "offline": ModelPrice(input=0, output=0),
}


def _env(name: str, *, shown: bool = True) -> Any:
    """Accept the conventional name and the ``ARENA_``-prefixed one.

    ``shown=False`` keeps the value out of the settings' repr (URLs may carry a password).
    """
    return Field(default=None, validation_alias=AliasChoices(name, f"ARENA_{name}"), repr=shown)


class Settings(BaseSettings):
    """Every setting Agent Arena reads. Environment names are given in docs/configuration.md."""

    model_config = SettingsConfigDict(
        env_prefix="ARENA_", extra="ignore", frozen=True, populate_by_name=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The arguments, then the environment. No ``.env`` file or secrets folder is read:
        none is configured, and asking each of them walked every field again."""
        return init_settings, env_settings

    # Services: unset means "start an embedded one" (Redis, MQTT) or SQLite.
    redis_url: str | None = _env("REDIS_URL", shown=False)
    mqtt_url: str | None = _env("MQTT_URL", shown=False)
    database_url: str | None = _env("DATABASE_URL", shown=False)
    anthropic_api_key: SecretStr | None = _env("ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = _env("ANTHROPIC_BASE_URL")

    # Folders.
    data_dir: Path = Path("data")
    agents_dir: Path = Path("agents")
    workspaces_dir: Path = Path("workspaces")
    prompts_dir: Path = Path("prompts")
    # The shared project agents with `runtime: claude-code` change (a git repository).
    project_dir: Path | None = None  # default: workspaces_dir / "shared"
    # The `claude` executable runs use (default: the one the Claude Agent SDK bundles).
    claude_cli: Path | None = None
    tz: str = "UTC"

    # Embedded Redis: besides its unix socket it listens on this loopback TCP port, so any
    # Redis client can post (0: the socket only).
    redis_port: int = Field(default=6379, ge=0, le=65535)

    # Embedded MQTT broker.
    mqtt_host: str = "127.0.0.1"
    mqtt_port: int = Field(default=1883, ge=1, le=65535)

    # The web console (`arena up`, `arena web`): where it listens (port 0: no console) and the
    # token it asks for; a host other than loopback needs one.
    web_host: str = "127.0.0.1"
    web_port: int = Field(default=8080, ge=0, le=65535)
    web_token: SecretStr | None = None

    # Messages and routing.
    max_message_bytes: int = Field(default=32 * 1024, ge=1)
    hop_limit: int = Field(default=3, ge=1, le=20)
    history_limit: int = Field(default=200, ge=1, le=100_000)

    # Context: the window and each layer's token budget (agents/*.yaml may override them).
    context_window: int = Field(default=200_000, ge=256)
    reserved_output_tokens: int | None = Field(default=None, ge=1)
    budget_identity: int = Field(default=700, ge=1)
    budget_summary: int = Field(default=500, ge=0)
    budget_memory_md: int = Field(default=800, ge=0)
    budget_logs: int = Field(default=600, ge=0)
    budget_recall: int = Field(default=1400, ge=0)  # about 20 references of 70 tokens each
    knowledge_poll_s: float = Field(default=2.0, ge=0.1, le=3600)  # knowledge files checked, s
    knowledge_embeddings: Literal["auto", "off"] = "auto"  # by meaning, with the weights

    # The daemon.
    consumer: str = Field(default_factory=socket.gethostname)
    claim_idle_ms: int = Field(default=30_000, ge=0)
    # Daemons sharing one Redis hold leases on the inbox's partitions for this long, renewed
    # every third of it: a daemon that dies hands its groups over within about this time.
    lease_ttl_s: float = Field(default=10.0, ge=0.3, le=3600)
    max_inflight: int = Field(default=1000, ge=1)
    # Connections the daemon opens to Redis at most; commands beyond them wait their turn.
    redis_max_connections: int = Field(default=64, ge=2, le=10_000)
    shutdown_timeout_s: float = Field(default=8.0, gt=0)
    workers: int = Field(default=1, ge=0, le=64)
    # Daemon processes `arena up` runs (its own, the others beside it) sharing the partitions:
    # with many groups busy each takes a share. Two with two cores or more (docs/performance.md).
    daemons: int = Field(default_factory=lambda: min(2, os.cpu_count() or 1), ge=1, le=64)
    # Workers that take only Claude Code runs (the `runs` queue): a run may take minutes.
    run_workers: int = Field(default=1, ge=0, le=64)
    # Approvals: who decides what a run asks (the sender name that may type `/approve` in a
    # group; the CLI and the console decide as this person), how long a run waits for the
    # answer before it ends waiting, and when an unanswered request expires (then denied).
    owner: str = Field(default="user", min_length=1, max_length=64)
    approval_wait_s: float = Field(default=120.0, ge=0, le=3600)
    approval_expiry_s: float = Field(default=1800.0, gt=0, le=30 * 24 * 3600)
    log_level: str = "INFO"
    # `arena up` keeps a warm process that answers the commands that read (data/cli.sock).
    cli_server: bool = True

    # Memory: the gate before anything is stored, and recall.
    memory_min_confidence: float = Field(default=0.7, ge=0, le=1)
    memory_daily_limit: int = Field(default=50, ge=0)
    recall_relevance_floor: float = Field(default=0.4, ge=0, le=1)
    recall_max_entries: int = Field(default=20, ge=0, le=100)
    recall_char_budget: int = Field(default=6000, ge=0)
    recall_require_source: bool = False
    # Memory tool calls an agent may make in one turn before its text must be the reply.
    max_tool_steps: int = Field(default=4, ge=0, le=20)

    # Background work: heartbeat distillation of MEMORY.md and rolling group summaries.
    distill_budget_tokens: int = Field(default=500, ge=50, le=20_000)
    distill_max_drop_share: float = Field(default=0.25, ge=0, le=1)
    summary_budget_tokens: int = Field(default=500, ge=50, le=20_000)
    summary_every_messages: int = Field(default=20, ge=1)

    # `arena status` exits 1 when a message has been pending, or waiting unread, or a job
    # queued with no live worker, this long.
    stuck_after_s: float = Field(default=300.0, gt=0)

    # Retention, in days; 0 keeps everything forever. Chat history older than this is deleted
    # once its group's rolling summary covers it; superseded and forgotten memories this long
    # after they were superseded or forgotten. MEMORY.md versions and daily logs are kept.
    history_retention_days: int = Field(default=0, ge=0, le=100 * 365)
    archive_retention_days: int = Field(default=0, ge=0, le=100 * 365)

    # The model.
    model_timeout_s: float = Field(default=60.0, gt=0)
    model_max_retries: int = Field(default=3, ge=0, le=10)
    # After this many failed calls in a row the provider is left alone for the cooldown.
    breaker_threshold: int = Field(default=5, ge=1)
    breaker_cooldown_s: float = Field(default=30.0, ge=0)

    # Background work (RQ jobs, scheduled by the daemon; times are in ``tz``).
    # When each agent's daily heartbeat distils its day's log: a crontab line.
    heartbeat_cron: str = "30 23 * * *"
    # A group quiet for this long gets a heartbeat for the agents that spoke in it (0: never).
    idle_minutes: int = Field(default=30, ge=0, le=7 * 24 * 60)
    # On start, days this far back with a daily log and no finished heartbeat are distilled.
    catch_up_days: int = Field(default=7, ge=0, le=60)
    # How often a failed job is tried again (after 10 s, 30 s, then 60 s) before it counts as
    # failed; and how long one run may take before it is stopped.
    job_retries: int = Field(default=3, ge=0, le=10)
    job_timeout_s: int = Field(default=300, ge=1, le=24 * 3600)

    # Spending caps per day (midnight to midnight in ``tz``); unset: no cap. An agent's own
    # caps go in its YAML (``caps: {tokens_per_day: ..., usd_per_day: ...}``).
    # Bounded (finite, at most a trillion tokens or a billion dollars) so a typo such as
    # ``inf`` fails at start-up rather than in every turn.
    cap_agent_tokens_per_day: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_DAY)
    cap_group_tokens_per_day: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_DAY)
    cap_tokens_per_day: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_DAY)
    cap_agent_usd_per_day: float | None = Field(
        default=None, gt=0, le=MAX_USD_PER_DAY, allow_inf_nan=False
    )
    cap_group_usd_per_day: float | None = Field(
        default=None, gt=0, le=MAX_USD_PER_DAY, allow_inf_nan=False
    )
    cap_usd_per_day: float | None = Field(
        default=None, gt=0, le=MAX_USD_PER_DAY, allow_inf_nan=False
    )
    # US dollars per million tokens, by model (JSON); a model missing here is priced as the
    # dearest one listed. A dollar cap needs at least one model with a price above nothing.
    model_prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=lambda: dict(_DEFAULT_PRICES)
    )

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a folder
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @field_validator("heartbeat_cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value, timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"not a crontab line (minute hour day month weekday): {exc}") from exc
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return upper

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value or None

    @field_validator("mqtt_url")
    @classmethod
    def _mqtt_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("mqtt://", "mqtts://")):
            raise ValueError("must start with mqtt:// or mqtts://")
        return value or None

    @field_validator("database_url", "anthropic_base_url")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    @field_validator(
        "cap_agent_tokens_per_day",
        "cap_group_tokens_per_day",
        "cap_tokens_per_day",
        "cap_agent_usd_per_day",
        "cap_group_usd_per_day",
        "cap_usd_per_day",
        mode="before",
    )
    @classmethod
    def _empty_cap_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices_json(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if not value.strip():
            return dict(_DEFAULT_PRICES)
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError(
                'must be JSON: {"model": {"input": 3, "output": 15, ...}} in $ per Mtok'
            ) from None

    @field_validator("anthropic_api_key", "web_token", mode="before")
    @classmethod
    def _empty_key_is_unset(cls, value: object) -> object:
        return value or None

    @property
    def project(self) -> Path:
        """The shared project's folder."""
        return self.project_dir if self.project_dir is not None else self.workspaces_dir / "shared"

    @property
    def zone(self) -> ZoneInfo:
        """The configured time zone."""
        return ZoneInfo(self.tz)

    @property
    def redis_socket(self) -> Path:
        """Where the embedded Redis listens when ``REDIS_URL`` is unset."""
        return self.data_dir / "redis.sock"

    @property
    def cli_socket(self) -> Path:
        """Where ``arena up``'s warm command server listens (``cli_server``)."""
        return self.data_dir / "cli.sock"

    @property
    def effective_redis_url(self) -> str:
        """The URL clients connect to: ``REDIS_URL`` or the embedded server's socket."""
        return self.redis_url or f"unix://{self.redis_socket.resolve()}"

    @property
    def public_redis_url(self) -> str:
        """The URL people and other programs use: ``REDIS_URL``, else the embedded server's
        loopback TCP port (its socket when ``redis_port`` is 0)."""
        if self.redis_url is None and self.redis_port:
            return f"redis://127.0.0.1:{self.redis_port}/0"
        return self.effective_redis_url

    @property
    def effective_mqtt_url(self) -> str:
        """The URL clients connect to: ``MQTT_URL`` or the embedded broker."""
        return self.mqtt_url or f"mqtt://{self.mqtt_host}:{self.mqtt_port}"

    @property
    def effective_database_url(self) -> str:
        """``DATABASE_URL`` or the SQLite file under the data folder."""
        return self.database_url or f"sqlite:///{(self.data_dir / 'arena.db').resolve()}"


_ENV_NAMES = {
    "redis_url": "REDIS_URL",
    "mqtt_url": "MQTT_URL",
    "database_url": "DATABASE_URL",
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "anthropic_base_url": "ANTHROPIC_BASE_URL",
}


def env_name(field_name: str) -> str:
    """The environment variable a field is read from."""
    return _ENV_NAMES.get(field_name, f"ARENA_{field_name.upper()}")


def load_settings(**overrides: Any) -> Settings:
    """Read the settings from the environment, with ``overrides`` on top.

    Raises:
        ConfigError: naming the first bad setting by its environment variable.
    """
    try:
        settings = Settings(**overrides)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        loc = str(first["loc"][0]) if first["loc"] else "settings"
        name = env_name(loc) if loc in Settings.model_fields else loc
        inner = [str(part) for part in first["loc"][1:]]  # e.g. a price's model and field
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(": ".join([name, *inner]), message) from None
    _check_dollar_caps(settings)
    return settings


def _check_dollar_caps(settings: Settings) -> None:
    """A dollar cap with every model free would never be reached: refuse it."""
    dollars = ("cap_agent_usd_per_day", "cap_group_usd_per_day", "cap_usd_per_day")
    named = [env_name(f) for f in dollars if getattr(settings, f) is not None]
    if named and not priced(settings.model_prices):
        raise ConfigError(
            named[0],
            "needs prices: set ARENA_MODEL_PRICES (no model there costs anything, "
            "so the cap would never be reached)",
        )


def priced(prices: dict[str, ModelPrice]) -> bool:
    """Whether any model in ``prices`` costs something."""
    return any(p.input > 0 or p.output > 0 for p in prices.values())
