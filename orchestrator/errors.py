"""Exceptions raised by Agent Arena.

OrchestratorError
├── ConfigError            a setting is missing or malformed
├── AgentDefinitionError   an agents/*.yaml file is invalid
├── TemplateError          a prompt template is missing or fails to render
├── ValidationError        a posted message, group id or sender is not acceptable
├── ProjectError           git refused or failed on the shared project (``problem``: git's line)
├── ServiceError           Redis, MQTT or the database cannot be reached
│   └── BusError           a Redis command failed (``kind``: Redis' own name for it)
│       └── BusUnavailable Redis did not answer (refused, reset, timed out): try again
└── LLMError               the model call failed (``retryable`` says whether to try again)

Every error builds its message from structured arguments kept as attributes, and never logs
itself: the boundary that handles it logs it once.
"""

from __future__ import annotations

__all__ = [
    "AgentDefinitionError",
    "BusError",
    "BusUnavailable",
    "ConfigError",
    "LLMError",
    "OrchestratorError",
    "ProjectError",
    "ServiceError",
    "TemplateError",
    "ValidationError",
]


class OrchestratorError(Exception):
    """Base class of every error Agent Arena raises on purpose."""


class ConfigError(OrchestratorError):
    """A setting has a bad value."""

    def __init__(self, setting: str, problem: str) -> None:
        self.setting = setting
        self.problem = problem
        super().__init__(f"{setting}: {problem}")


class AgentDefinitionError(OrchestratorError):
    """An agent definition file is invalid."""

    def __init__(self, path: str, field: str, problem: str) -> None:
        self.path = path
        self.field = field
        self.problem = problem
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {problem}")


class TemplateError(OrchestratorError):
    """A prompt template is missing or failed to render."""

    def __init__(self, template: str, problem: str) -> None:
        self.template = template
        self.problem = problem
        super().__init__(f"template {template}: {problem}")


class ValidationError(OrchestratorError):
    """Input from outside (a posted message, an id) is not acceptable."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class ProjectError(OrchestratorError):
    """Git refused or failed on the shared project: ``problem`` is git's message, in one line."""

    def __init__(self, project: str, problem: str) -> None:
        self.project = project
        self.problem = problem
        super().__init__(f"project {project}: {problem}")


class ServiceError(OrchestratorError):
    """A backing service (Redis, MQTT, database) is unavailable."""

    def __init__(self, service: str, problem: str, hint: str = "") -> None:
        self.service = service
        self.problem = problem
        self.hint = hint
        message = f"{service}: {problem}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class BusError(ServiceError):
    """A Redis command failed.

    Raised by the adapters in place of redis-py's errors; ``kind`` is the name redis-py gave
    the failure (``ResponseError``, ...), empty when the package itself found the problem.
    """

    def __init__(self, problem: str, hint: str = "", *, kind: str = "") -> None:
        self.kind = kind
        super().__init__("redis", problem, hint)


class BusUnavailable(BusError):
    """Redis did not answer: the connection was refused, reset or timed out. It may be
    restarting; what failed can be tried again."""


class LLMError(OrchestratorError):
    """The model call failed."""

    def __init__(self, provider: str, problem: str, *, retryable: bool, status: int | None = None):
        self.provider = provider
        self.problem = problem
        self.retryable = retryable
        self.status = status
        code = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{provider}{code}: {problem}")
