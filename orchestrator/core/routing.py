"""Who answers a message: explicit mentions first, then routing rules, then the default agent.

Everything here is a pure function of the text and the agents; nothing does I/O.

1. **Mentions.** ``@id`` or ``@name`` (case-insensitive; a name with spaces may be written with
   or without them, so "QA Lead" answers to ``@qalead`` and ``@QA Lead``). The ``@`` must not
   follow a word character (``bob@architect.io`` is an address, not a mention) and the mention
   must end where the word ends. The message goes to exactly the agents mentioned, in order,
   but for one mentioned only as whom to ask next ("…, then ask @tester to check it"): that
   one is asked by a colleague's hand-off, not now (unless nobody else is mentioned).
2. **Rules.** Otherwise the matching rule with the highest priority wins; ties go to the rule
   listed first (agents in order, then each agent's rules in order). A rule matches when every
   condition it has holds: one of its keywords, one of its patterns, and its length bounds.
3. **Default.** Otherwise the agent marked ``default``, else the first agent.

Chinese, Japanese and Korean are written without spaces between words, so their characters
count as word boundaries here: ``请@architect看一下`` mentions the architect and ``写个test吧``
contains the keyword "test". Lengths are counted in characters of the stripped text, never bytes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.core.models import AgentSpec, RouteDecision, RouteReason, RoutingRule

__all__ = ["Router", "RuleSet", "find_mentions", "handoff_targets", "route"]

logger = logging.getLogger(__name__)

# Kana, CJK ideographs (with extensions and compatibility forms) and Hangul syllables.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
_WORD = f"[^\\W{_CJK}]"
_NOT_BEFORE_WORD = f"(?!{_WORD})"
_WORD_CHAR = re.compile(_WORD)
_WORDS = re.compile(f"{_WORD}+")
_ASCII_WORDS = re.compile(r"\w+", re.ASCII)  # the same as _WORDS on ASCII text, but faster
_PLAIN_WORD = re.compile(r"[a-z0-9_]+")
# A mention right after "then ask", "and ask", "after that ask": whom to ask next, not now.
_LATER = re.compile(
    r"\b(?:then|and|after\s+that|afterwards)\s+(?:please\s+)?ask\s+$", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class _Message:
    """What rules look at, computed once per message."""

    text: str
    folded: str  # casefolded, so keywords match in any case
    is_ascii: bool
    words: frozenset[str]  # maximal runs of word characters in ``folded``
    length: int  # characters of the stripped text

    @classmethod
    def of(cls, text: str) -> _Message:
        folded = text.casefold()
        is_ascii = folded.isascii()
        words = frozenset((_ASCII_WORDS if is_ascii else _WORDS).findall(folded))
        length = len(text.strip())
        return cls(text=text, folded=folded, is_ascii=is_ascii, words=words, length=length)


@dataclass(frozen=True, slots=True)
class _Keyword:
    """One keyword, matched in the cheapest way that is still exact.

    A plain English word is looked up among the message's words, a single non-ASCII word is a
    substring ("测试"), and the rest ("unit test", "c++") are regexes over the casefolded text,
    whole words for ASCII. Whitespace inside a keyword matches any run of whitespace.

    Whether an ASCII keyword's match stands as whole words is checked beside the regex, not in
    it: a lookaround over the word characters (Unicode, but not CJK) made each regex take 3 ms
    to compile, and a team's keywords a fifth of a second, at every start and `arena route`.
    """

    text: str
    word: str | None = None  # a plain word: must be one of the message's words
    substring: str | None = None  # must occur in the casefolded message
    regex: re.Pattern[str] | None = None  # must match the casefolded message...
    gate: str | None = None  # ...which must then contain this word: a quick test first
    whole_start: bool = False  # the match must not follow a word character
    whole_end: bool = False  # the match must not be followed by a word character

    @classmethod
    def build(cls, keyword: str) -> _Keyword:
        folded = keyword.casefold()
        if keyword.isascii() and _PLAIN_WORD.fullmatch(folded):
            return cls(text=keyword, word=folded)
        parts = folded.split()
        if not parts:
            return cls(text=keyword, regex=re.compile("(?!)"))  # blank: matches nothing
        if not keyword.isascii():
            if len(parts) == 1:
                return cls(text=keyword, substring=parts[0])
            return cls(text=keyword, regex=re.compile(r"\s+".join(map(re.escape, parts))))
        # English words match whole: "test" is not in "latest". Every word inside such a
        # keyword is then a whole word of the message too, so the longest one makes a cheap
        # gate.
        inner = _PLAIN_WORD.findall(folded)
        return cls(
            text=keyword,
            regex=re.compile(r"\s+".join(re.escape(part) for part in parts)),
            gate=max(inner, key=len) if inner else None,
            whole_start=_WORD_CHAR.match(parts[0][0]) is not None,
            whole_end=_WORD_CHAR.match(parts[-1][-1]) is not None,
        )

    def found_in(self, message: _Message) -> bool:
        if self.word is not None:
            return self.word in message.words
        if self.substring is not None:
            return self.substring in message.folded
        if self.gate is not None and self.gate not in message.words:
            return False
        return self.regex is not None and self._search(self.regex, message.folded)

    def _search(self, regex: re.Pattern[str], text: str) -> bool:
        """Whether ``regex`` matches ``text`` somewhere as whole words (where it must)."""
        start = 0
        while (match := regex.search(text, start)) is not None:
            before, after = match.start() - 1, match.end()
            if not (
                (self.whole_start and before >= 0 and _WORD_CHAR.match(text, before))
                or (self.whole_end and _WORD_CHAR.match(text, after))
            ):
                return True
            start = match.start() + 1
        return False


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    """A routing rule with its keywords and patterns compiled once."""

    name: str
    rule: RoutingRule
    agents: tuple[str, ...]
    keywords: tuple[_Keyword, ...]
    patterns: tuple[re.Pattern[str], ...]
    words: frozenset[str]  # the plain-word keywords: one set operation tests them all
    others: tuple[_Keyword, ...]  # the rest, each tested on its own
    ascii_others: tuple[_Keyword, ...]  # those of the rest that can match ASCII text

    @classmethod
    def build(cls, name: str, rule: RoutingRule, agents: tuple[str, ...]) -> _CompiledRule:
        keywords = tuple(_Keyword.build(k) for k in rule.keywords)
        return cls(
            name=name,
            rule=rule,
            agents=agents,
            keywords=keywords,
            patterns=tuple(re.compile(p, re.IGNORECASE) for p in rule.patterns),
            words=frozenset(k.word for k in keywords if k.word is not None),
            others=tuple(k for k in keywords if k.word is None),
            ascii_others=tuple(
                k for k in keywords if k.word is None and k.text.casefold().isascii()
            ),
        )

    def matches(self, message: _Message) -> bool:
        rule = self.rule
        if rule.min_length is not None and message.length < rule.min_length:
            return False
        if rule.max_length is not None and message.length > rule.max_length:
            return False
        if (
            self.keywords
            and self.words.isdisjoint(message.words)
            and not any(
                keyword.found_in(message)
                for keyword in (self.ascii_others if message.is_ascii else self.others)
            )
        ):
            return False
        return not self.patterns or any(p.search(message.text) for p in self.patterns)

    def decide(self, message: _Message) -> RouteDecision:
        hits = tuple(k.text for k in self.keywords if k.found_in(message))
        reasons = []
        if hits:
            reasons.append("keywords " + ", ".join(hits))
        patterns = [p.pattern for p in self.patterns if p.search(message.text)]
        if patterns:
            reasons.append("patterns " + ", ".join(patterns))
        if self.rule.min_length is not None or self.rule.max_length is not None:
            low = self.rule.min_length if self.rule.min_length is not None else 0
            high = self.rule.max_length if self.rule.max_length is not None else "∞"
            reasons.append(f"{message.length} characters within [{low}, {high}]")
        detail = f"rule {self.name} (priority {self.rule.priority}): " + "; ".join(reasons)
        return RouteDecision(
            agents=self.agents,
            reason=RouteReason.RULE,
            rule=self.name,
            keywords_hit=hits,
            detail=detail,
        )


class RuleSet:
    """A few rules compiled once, outside the router: which of them (if any) a text matches.

    An agent's ``code.rules`` say when its turn becomes a run on the project; they are written
    in the routing rules' format and match as routing rules do (highest priority first, ties
    in the order given). Rules without a name are called ``<prefix>#<index>``.
    """

    def __init__(self, rules: Sequence[RoutingRule], prefix: str) -> None:
        compiled = [
            _CompiledRule.build(rule.name or f"{prefix}#{index}", rule, rule.agents)
            for index, rule in enumerate(rules)
        ]
        self._rules = tuple(sorted(compiled, key=lambda r: -r.rule.priority))

    def first(self, text: str) -> RouteDecision | None:
        """The decision of the best rule ``text`` matches (None: no rule matches)."""
        if not self._rules:
            return None
        message = _Message.of(text)
        for rule in self._rules:
            if rule.matches(message):
                return rule.decide(message)
        return None


class Router:
    """Routes messages among a fixed set of agents; build once, call ``route`` many times.

    Args:
        agents: the agents, in the order that breaks priority ties. At least one.

    Raises:
        ValueError: if ``agents`` is empty.
        re.error: if a rule pattern is not a valid regular expression (``load_agents`` checks).
    """

    def __init__(self, agents: Sequence[AgentSpec]) -> None:
        if not agents:
            raise ValueError("no agents to route to")
        self.agents = tuple(agents)
        known = {agent.id for agent in self.agents}
        self.default = next((a.id for a in self.agents if a.default), self.agents[0].id)
        self._mentions, self._handles = _mention_regex(self.agents)
        rules = []
        for agent in self.agents:
            for index, rule in enumerate(agent.rules):
                targets = tuple(dict.fromkeys(a for a in rule.agents if a in known))
                if not targets:
                    logger.debug("rule %s#%d names no known agent; skipped", agent.id, index)
                    continue
                name = rule.name or f"{agent.id}#{index}"
                rules.append(_CompiledRule.build(name, rule, targets))
        # sorted() is stable, so equal priorities keep agent order, then rule order.
        self._rules = tuple(sorted(rules, key=lambda r: -r.rule.priority))

    def _addressed(self, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The agents ``text`` asks now, and those it names only as whom to ask next."""
        if self._mentions is None or "@" not in text:
            return (), ()
        now: list[str] = []
        later: list[str] = []
        for match in self._mentions.finditer(text):
            if match.lastgroup:
                before = text[max(0, match.start() - 40) : match.start()]
                (later if _LATER.search(before) else now).append(self._handles[match.lastgroup])
        asked = tuple(dict.fromkeys(now))
        return asked, tuple(a for a in dict.fromkeys(later) if a not in asked)

    def find_mentions(self, text: str) -> tuple[str, ...]:
        """The ids of the agents ``text`` mentions, in order of first mention."""
        if self._mentions is None or "@" not in text:
            return ()
        found = (self._handles[m.lastgroup] for m in self._mentions.finditer(text) if m.lastgroup)
        return tuple(dict.fromkeys(found))

    def route(self, text: str) -> RouteDecision:
        """Decide who answers ``text`` (see the module docstring for the order)."""
        now, later = self._addressed(text)
        if now or later:
            detail = "mentioned " + ", ".join(f"@{agent}" for agent in now or later)
            if now and later:
                detail += "; " + ", ".join(f"@{a}" for a in later) + " to be asked next"
            return RouteDecision(agents=now or later, reason=RouteReason.MENTION, detail=detail)
        message = _Message.of(text)
        for rule in self._rules:
            if rule.matches(message):
                return rule.decide(message)
        return RouteDecision(
            agents=(self.default,),
            reason=RouteReason.DEFAULT,
            detail=f"no mention or rule matched; default agent {self.default}",
        )

    def handoffs(self, reply_text: str, author: str) -> tuple[str, ...]:
        """The agents a reply hands the turn to: those it mentions, never its own author."""
        return tuple(agent for agent in self.find_mentions(reply_text) if agent != author)


def _mention_regex(agents: Sequence[AgentSpec]) -> tuple[re.Pattern[str] | None, dict[str, str]]:
    """One regex for every ``@handle``, and the agent id behind each of its named groups."""
    # (compact length, names after ids, handle source, agent id); ids win over names.
    candidates: list[tuple[int, int, tuple[str, ...], str]] = []
    for agent in agents:
        candidates.append((len(agent.id), 0, (agent.id,), agent.id))
    for agent in agents:
        parts = tuple(agent.name.split())
        if parts:
            candidates.append((len("".join(parts)), 1, parts, agent.id))
    # Longest first, so "@qa-lead" is not read as "@qa" followed by "-lead".
    candidates.sort(key=lambda c: (-c[0], c[1]))
    handles: dict[str, str] = {}
    alternatives: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for _, _, parts, agent_id in candidates:
        folded = tuple(part.casefold() for part in parts)
        if folded in seen:
            continue
        seen.add(folded)
        source = " ?".join(re.escape(part) for part in parts)
        group = f"h{len(handles)}"
        handles[group] = agent_id
        alternatives.append(f"(?P<{group}>{source})")
    if not alternatives:
        return None, handles
    pattern = f"@(?<!{_WORD}@)(?:{'|'.join(alternatives)}){_NOT_BEFORE_WORD}"
    return re.compile(pattern, re.IGNORECASE), handles


def find_mentions(text: str, agents: Sequence[AgentSpec]) -> tuple[str, ...]:
    """The ids of the agents ``text`` mentions as ``@id`` or ``@name``.

    Args:
        text: the message.
        agents: the agents that can be mentioned; unknown handles are ignored.

    Returns:
        Agent ids in order of first mention, each once.
    """
    if not agents:
        return ()
    return Router(agents).find_mentions(text)


def route(text: str, agents: Sequence[AgentSpec]) -> RouteDecision:
    """Decide which agents answer ``text``: mentions, else the best rule, else the default.

    Args:
        text: the message.
        agents: the agents to choose from, in tie-breaking order. At least one.

    Returns:
        The decision, naming at least one of ``agents``.

    Raises:
        ValueError: if ``agents`` is empty.
    """
    return Router(agents).route(text)


def handoff_targets(reply_text: str, author: str, agents: Sequence[AgentSpec]) -> tuple[str, ...]:
    """The agents a reply hands the turn to: those it mentions, never its own author.

    Args:
        reply_text: the reply.
        author: the id of the agent that wrote it.
        agents: the agents that can be mentioned.

    Returns:
        Agent ids in order of first mention, without ``author``.
    """
    if not agents:
        return ()
    return Router(agents).handoffs(reply_text, author)
