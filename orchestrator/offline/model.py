"""A model stand-in for running without an API key: deterministic replies, no I/O.

``OfflineProvider`` answers every request the same way for the same input. Its reply:

1. Starts with one line in the agent's role::

       [offline] <name> (<role>) here. No model is configured (set ANTHROPIC_API_KEY),
       so this is an offline reply to <sender>: "<quote>"

   (shown here on two lines, sent as one). The quote is the trigger message with every ``@``
   removed, so that quoting a mention never hands the turn to another agent, its whitespace
   collapsed to single spaces, marker-shaped text made inert, and cut to at most 200
   characters (the last one an ellipsis when cut). The sender, name and role also lose their ``@``.

2. Then, one marker per line, for each sentence of the trigger message (split on ``.``,
   ``!``, ``?``, their full-width forms U+3002, U+FF01 and U+FF1F, and line breaks) that
   states a decision, requirement or task::

       <!--SAVE_MEMORY:{"type": "decision", "content": "<sentence>", "confidence": 0.9}-->

   Detection is case-insensitive and the first type that matches wins, in this order:

   - decision and requirement: as :mod:`orchestrator.offline.cues` tells them ("we decided",
     "let's go with"…; "must ", "we need"…; never in a question, and never "must" as a guess
     such as "that must have been hard");
   - task: "please ", "todo:", "task:" or "can you" in a sentence that also @mentions
     someone, or a sentence that starts with "todo:" or "task:". A mention is ``@`` then a
     letter or digit, not right after a letter, digit, ``_`` or ``.`` (so an e-mail address
     is not one).

3. Then, for each sentence that teaches the agent something ("lesson:", "next time",
   "remember that", "note to self")::

       <!--SAVE_TO_PERSONAL:{"content": "<sentence>", "type": "lesson"}-->

4. With the memory tools on (the request lists ``memory_search``), a question asking what was
   decided (``what did we decide about …?``, ``what was decided on …?``) first calls
   ``memory_search`` with the question, its ``@`` mentions removed, as the query (the call's
   id is ``offline_<agent>_<message id>``, the same when the turn is replayed); once the
   result is back, the reply's first line is followed by the hits, quoted with their ids and
   citations (``@`` removed, markers inert), or by "I found nothing in memory about it."

5. When the references hold passages of knowledge or lorebook entries, the first one shown is
   cited after the first line: ``From <locator> (<trust>): "<its text>"`` (the locator as it
   is, since its ``@`` follows a digit and starts no mention), the text its quoted
   lines without the ``> `` and the Markdown heading marks, whitespace collapsed, ``@`` removed,
   markers inert, cut to 200 characters as the quote is.

A marker's sentence is stripped and loses its ``@``; ``<!--`` in it becomes ``&lt;!--`` and
``-->`` becomes ``--&gt;``, so no content can break a marker. The usage counts words, not
tokens (:func:`prompt_words`): input is the words of the system prompt, its tail and the
messages, output the words of the reply; the daily caps estimate an offline turn the same way,
so a capped turn spends what it reserved.
The completion reports model "offline", provider "offline", stop reason "end_turn" and a
latency of 0 ms.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from types import TracebackType
from typing import Literal, Self

from orchestrator.core.markers import neutralise
from orchestrator.core.models import Completion, LLMRequest, Usage
from orchestrator.core.tools import ToolCall
from orchestrator.offline import cues

__all__ = ["OFFLINE_MODEL", "OfflineProvider", "markers", "prompt_words"]

# The offline model's name, as the model (its row of the prices) and as the provider.
OFFLINE_MODEL = "offline"

MemoryType = Literal["decision", "requirement", "task"]

_QUOTE_LIMIT = 200
_MENTION_RE = re.compile(r"(?<![\w.])@[A-Za-z0-9]")
_TASK = ("please ", "todo:", "task:", "can you")
_TASK_PREFIX = ("todo:", "task:")
_LESSON = ("lesson:", "next time", "remember that", "note to self")
_MENTION_WORD_RE = re.compile(r"(?<![\w.])@[\w-]+")
# A passage of knowledge as the references show it (core.context.references).
_PASSAGE_RE = re.compile(
    r"^\[\d+\] \((?:knowledge|lore), (trusted|external), source: ([^\n]+?)"
    r"(?:, section: [^\n]*)?\)\n"
    r"((?:> [^\n]*(?:\n|$))+)",
    re.MULTILINE,
)
_ASKS_DECIDED = re.compile(
    r"\bwhat\s+(?:did\s+(?:we|you|they|i)\s+decide|(?:was|were|have\s+we|has\s+been)\s+decided)"
    r"\s+(?:about|on|for|regarding)\s+\S",
    re.IGNORECASE,
)


def prompt_words(request: LLMRequest) -> int:
    """An offline turn's input: the words of the system prompt, its tail and the messages."""
    texts = [request.system, request.system_tail, *(m.get("content", "") for m in request.messages)]
    return sum(_words(t) if isinstance(t, str) else len(str(t).split()) for t in texts)


@lru_cache(maxsize=16384)
def _words(text: str) -> int:
    """How many words ``text`` has: counted once (the same system prompt and messages come
    back turn after turn, and each turn counts them twice: the caps' estimate, the usage)."""
    return len(text.split())


class OfflineProvider:
    """Answers in role without a model, and saves what the message decides or asks."""

    name = OFFLINE_MODEL
    offline = True

    async def complete(self, request: LLMRequest) -> Completion:
        """Build the offline reply to ``request``.

        Args:
            request: The model call the agent would have made.

        Returns:
            The reply, with token counts as usage.
        """
        call = _search_call(request)
        text = _reply(request) if call is None else ""
        usage = Usage(input_tokens=prompt_words(request), output_tokens=len(text.split()))
        return Completion(
            text=text,
            model=OFFLINE_MODEL,
            provider=self.name,
            usage=usage,
            stop_reason="end_turn" if call is None else "tool_use",
            tool_calls=() if call is None else (call,),
        )

    async def aclose(self) -> None:
        """Nothing to release; here so the provider can be used like any other."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _reply(request: LLMRequest) -> str:
    """The reply text described in the module docstring: a greeting, then markers."""
    agent, trigger = request.agent, request.trigger
    lines = [
        f"[offline] {_clean(agent.name)} ({_clean(agent.role)}) here. No model is configured "
        f"(set ANTHROPIC_API_KEY), so this is an offline reply to {_clean(trigger.sender)}: "
        f'"{_quote(trigger.text)}"'
    ]
    passage = _first_passage(request.system_tail)
    if passage is not None:
        lines.append(passage)
    memory, personal = markers(trigger.text)
    lines.extend(memory)
    for exchange in request.exchanges:
        for result in exchange.results:
            lines.append(_found(result.content, result.is_error, result.hits))
    lines.extend(personal)
    return "\n".join(lines)


def _first_passage(tail: str) -> str | None:
    """The citation of the first passage of knowledge in the references, if any."""
    if "(knowledge, " not in tail and "(lore, " not in tail:
        return None  # most turns: a look at the text is cheaper than the pattern
    found = _PASSAGE_RE.search(tail)
    if found is None:
        return None
    trust, locator, quoted = found.group(1), found.group(2), found.group(3)
    lines = [line[2:].lstrip("#").strip() for line in quoted.splitlines()]
    text = " ".join(line for line in lines if line)
    # A locator's "@" follows a digit, so it starts no mention; any other "@" goes.
    where = neutralise(locator) if _MENTION_RE.search(locator) is None else _clean(locator)
    return f'From {where} ({trust}): "{_quote(text)}"'


def markers(text: str) -> tuple[list[str], list[str]]:
    """The markers a reply to ``text`` carries (steps 2 and 3 of the module docstring).

    Args:
        text: The message replied to.

    Returns:
        The ``SAVE_MEMORY`` markers, then the ``SAVE_TO_PERSONAL`` ones, one line each.
    """
    sentences = [(cues.bare(s).strip(), question) for s, question in cues.sentences(text)]
    memory, personal = [], []
    for sentence, question in sentences:
        kind = _memory_type(sentence, question)
        if kind is not None:
            payload = {"type": kind, "content": _marker_content(sentence), "confidence": 0.9}
            memory.append(f"<!--SAVE_MEMORY:{json.dumps(payload, ensure_ascii=False)}-->")
        if _has_any(sentence, _LESSON):
            payload = {"content": _marker_content(sentence), "type": "lesson"}
            personal.append(f"<!--SAVE_TO_PERSONAL:{json.dumps(payload, ensure_ascii=False)}-->")
    return memory, personal


def _search_call(request: LLMRequest) -> ToolCall | None:
    """The ``memory_search`` a question about a decision makes first, if tools are on."""
    offered = any(tool.get("name") == "memory_search" for tool in request.tools)
    if not offered or request.exchanges or not request.may_call_tools:
        return None
    question = " ".join(cues.bare(_MENTION_WORD_RE.sub("", request.trigger.text)).split())
    if not _ASKS_DECIDED.search(question):
        return None
    call_id = f"offline_{request.agent.id}_{request.trigger.id}"
    return ToolCall(id=call_id, name="memory_search", input={"query": question[:2000]})


def _found(content: str, is_error: bool, hits: int | None) -> str:
    """What a search found, quoted with its ids and citations."""
    if is_error:
        return f"My memory search failed: {_clean(content)}"
    if not hits:
        return "I found nothing in memory about it."
    quoted = "\n".join(f"- {_clean(line)}" for line in content.splitlines())
    return f"\nI searched memory (memory_search) and found:\n{quoted}"  # a paragraph


def _memory_type(sentence: str, question: bool) -> MemoryType | None:
    """Whether a sentence states a decision, a requirement or a task, first match wins."""
    if (stated := cues.states(sentence, question=question)) is not None:
        return stated
    lowered = sentence.lower().lstrip()
    if lowered.startswith(_TASK_PREFIX) or (
        _has_any(sentence, _TASK) and _MENTION_RE.search(sentence)
    ):
        return "task"
    return None


def _has_any(sentence: str, phrases: tuple[str, ...]) -> bool:
    lowered = sentence.lower()
    return any(phrase in lowered for phrase in phrases)


def _clean(text: str) -> str:
    """Text safe to repeat: no ``@`` to start a mention, no marker to save a memory."""
    return neutralise(text.replace("@", ""))


def _quote(text: str) -> str:
    quoted = " ".join(_clean(text).split())
    if len(quoted) > _QUOTE_LIMIT:
        quoted = quoted[: _QUOTE_LIMIT - 1] + "…"
    return quoted


def _marker_content(sentence: str) -> str:
    """A sentence as marker content that cannot close or open a marker early."""
    return sentence.strip().replace("@", "").replace("<!--", "&lt;!--").replace("-->", "--&gt;")
