"""Which model provider a process uses: Anthropic's behind a circuit breaker when a key is
set, else the offline one. The daemon and the background jobs both ask here.

The Anthropic SDK takes about two seconds of CPU to import, so it is imported only when a key
is set: without one, the daemon, its workers and every CLI call that reaches here start that
much sooner.
"""

from __future__ import annotations

from orchestrator.adapters.breaker import CircuitBreaker
from orchestrator.core.turns import LLM
from orchestrator.offline.model import OfflineProvider
from orchestrator.settings import Settings

__all__ = ["build_llm"]


def build_llm(settings: Settings) -> LLM:
    """The Anthropic provider when a key is set, else the offline one."""
    if settings.anthropic_api_key is None:
        return OfflineProvider()
    from orchestrator.adapters.llm import AnthropicProvider  # the SDK: see the module doc

    provider = AnthropicProvider(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        timeout_s=settings.model_timeout_s,
        max_retries=settings.model_max_retries,
    )
    return CircuitBreaker(
        provider, threshold=settings.breaker_threshold, cooldown_s=settings.breaker_cooldown_s
    )
