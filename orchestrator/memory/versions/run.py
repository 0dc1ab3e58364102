"""The versioned-job runner: the steps every job shares that writes a new version of a file
(the heartbeat's ``MEMORY.md``, a group's rolling summary). A job brings its own
:class:`Rules`; :func:`run_versioned` does the rest:

1. Read (the job's own ``read``): the inputs, and the file, a hand edit stored as a version
   first. When the job's ``skip`` gives a reason there is nothing to do: "skipped", no call.
2. Answer: the offline provider is not asked, the job's ``offline`` makes the text; any other
   model gets the job's ``request``. An answer cut off at its token limit counts as none. A
   model error is recorded as an "error" run, then raised for the job layer to retry.
3. Check: not cut off, not empty, within ``budget_tokens``, no memory markers
   (:func:`orchestrator.memory.versions.file.text_problem`), then the job's own ``problem``.
   A failing answer leaves the file untouched: "rejected". One that ``unchanged`` calls the
   same as before: "skipped".
4. Write atomically unless the file changed since step 1 ("conflict"), and store the version.

Every attempt, whatever came of it, is kept in the growth log. The file and database work
runs in threads; only the model call runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from orchestrator.core.models import Completion, LLMRequest
from orchestrator.core.turns import LLM
from orchestrator.errors import LLMError
from orchestrator.memory.versions.file import VersionedFile, text_problem
from orchestrator.memory.versions.store import Version

__all__ = [
    "TEMPERATURE",
    "Attempt",
    "Outcome",
    "Rules",
    "Staged",
    "Status",
    "answer_text",
    "run_versioned",
]

logger = logging.getLogger(__name__)

Status = Literal["written", "skipped", "rejected", "conflict"]

TEMPERATURE = 0.2
_FENCE_RE = re.compile(r"^```[\w-]*\n(?P<body>.*)\n```$", re.DOTALL)


class Staged(Protocol):
    """A job after it has read its inputs: where the result goes and what it replaces."""

    @property
    def file(self) -> VersionedFile: ...
    @property
    def trigger(self) -> str: ...
    @property
    def now(self) -> datetime: ...
    @property
    def previous(self) -> str: ...
    @property
    def source(self) -> dict[str, Any]: ...


class Outcome(Protocol):
    """What a versioned job returns, as far as the job layer reports it."""

    @property
    def status(self) -> str: ...
    @property
    def version(self) -> int | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def tokens(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """What one run came to; ``version`` and the rest are set when one was written."""

    status: Status
    reason: str = ""
    version: int | None = None
    tokens: int = 0
    lines_added: int = 0
    lines_removed: int = 0


J = TypeVar("J", bound=Staged)
R = TypeVar("R")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules(Generic[J, R]):
    """What one kind of versioned job does its own way.

    Attributes:
        label: The run in log lines, e.g. ``"summary of demo"``.
        name: The file in the conflict reason, e.g. ``"MEMORY.md"``.
        budget_tokens: The most tokens a new version may have.
        count: Counts the tokens of a text.
        skip: Why there is nothing to do (blocking), or None.
        offline: The new text without a model, the same for the same input.
        request: The request to the model (blocking: it renders a template).
        problem: Why an answer may not become the new version, past the shared checks.
        unchanged: Whether a new text (previous, new) says the same as the previous one.
        outcome: The job's own outcome from its staged input and what the run came to.
    """

    label: str
    name: str
    budget_tokens: int
    count: Callable[[str], int]
    skip: Callable[[J], str | None]
    offline: Callable[[J], str]
    request: Callable[[J], LLMRequest]
    problem: Callable[[J, str], str | None]
    unchanged: Callable[[str, str], bool]
    outcome: Callable[[J, Attempt], R]


async def run_versioned(read: Callable[[], J], rules: Rules[J, R], llm: LLM, now: datetime) -> R:
    """Run one versioned job (the steps in the module doc).

    Args:
        read: Reads the inputs and the file (blocking).
        rules: What the job does its own way.
        llm: The model provider; with the offline one no call is made.
        now: When it runs; must carry a time zone.

    Raises:
        LLMError: when the model call failed (recorded as an "error" run first).
        ValueError: when ``now`` carries no time zone.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must carry a time zone")
    job, skipped = await asyncio.to_thread(_prepare, read, rules)
    if skipped is not None:
        return skipped
    try:
        text = await _answer(job, rules, llm)
    except LLMError as exc:
        await asyncio.to_thread(
            job.file.note, "error", str(exc), trigger=job.trigger, now=job.now, source=job.source
        )
        raise
    return await asyncio.to_thread(_finish, job, rules, text)


def answer_text(completion: Completion) -> str | None:
    """The file a model wrote, without a code fence around it all; None when the answer was
    cut off at ``max_tokens``, so that it is rejected rather than written half."""
    if completion.stop_reason == "max_tokens":
        return None
    stripped = completion.text.strip()
    fenced = _FENCE_RE.match(stripped)
    return fenced.group("body").strip() if fenced else stripped


def _prepare(read: Callable[[], J], rules: Rules[J, R]) -> tuple[J, R | None]:
    """Step 1: the staged job, and its outcome when there is nothing to do."""
    job = read()
    reason = rules.skip(job)
    return job, (None if reason is None else _record(job, rules, "skipped", reason))


async def _answer(job: J, rules: Rules[J, R], llm: LLM) -> str | None:
    """Step 2: the new text, from the model or made offline (None: cut off)."""
    if llm.offline:
        return rules.offline(job)
    request = await asyncio.to_thread(rules.request, job)
    return answer_text(await llm.complete(request))


def _finish(job: J, rules: Rules[J, R], answer: str | None) -> R:
    """Steps 3 and 4: check the answer, then write it unless someone else wrote first."""
    if answer is None:
        return _record(job, rules, "rejected", "the answer was cut off at its token limit")
    problem = text_problem(answer, rules.budget_tokens, rules.count)
    problem = problem or rules.problem(job, answer)
    if problem:
        return _record(job, rules, "rejected", problem)
    text = answer.strip() + "\n"
    if rules.unchanged(job.previous, text):
        return _record(job, rules, "skipped", "the answer changes nothing")
    version = job.file.replace(
        job.previous, text, trigger=job.trigger, now=job.now, source=job.source
    )
    if version is None:
        reason = f"{rules.name} changed while the answer was being written"
        return _record(job, rules, "conflict", reason)
    return rules.outcome(job, _written(version, rules.label))


def _written(version: Version, label: str) -> Attempt:
    added, removed = version.lines_added, version.lines_removed
    logger.debug("%s: version %d (+%d -%d lines)", label, version.version, added, removed)
    return Attempt(
        status="written",
        version=version.version,
        tokens=version.tokens,
        lines_added=added,
        lines_removed=removed,
    )


def _record(job: J, rules: Rules[J, R], status: Status, reason: str) -> R:
    """Keep an attempt that wrote nothing, and say what came of it."""
    job.file.note(status, reason, trigger=job.trigger, now=job.now, source=job.source)
    logger.debug("%s %s: %s", rules.label, status, reason)
    return rules.outcome(job, Attempt(status=status, reason=reason))
