"""Tests for orchestrator.core.routing: mentions, rules, the default agent and handoffs."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.agents import load_agents
from orchestrator.core.models import AgentSpec, RouteReason, RoutingRule
from orchestrator.core.routing import Router, find_mentions, handoff_targets, route

AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents"


@cache
def shipped() -> tuple[AgentSpec, ...]:
    return load_agents(AGENTS_DIR)


def agent(agent_id: str, *rules: RoutingRule, name: str = "", default: bool = False) -> AgentSpec:
    return AgentSpec(
        id=agent_id,
        name=name or agent_id.title(),
        role="role",
        model="claude-sonnet-4-5",
        default=default,
        rules=rules,
    )


def rule(*agents: str, **fields: object) -> RoutingRule:
    return RoutingRule(agents=agents, **fields)  # type: ignore[arg-type]


@pytest.fixture
def team() -> tuple[AgentSpec, ...]:
    return (
        agent("receptionist", rule("receptionist", keywords=("hello",), priority=10)),
        agent("architect", rule("architect", keywords=("design", "架构"), priority=50)),
        agent("developer", rule("developer", keywords=("code", "实现"), priority=40)),
        agent("tester", rule("tester", keywords=("test", "bug", "测试"), priority=60)),
        agent("qa-lead", name="QA Lead"),
    )


def test_mention_by_id(team):
    """An ``@id`` routes to exactly that agent, whatever the rules say."""
    decision = route("@developer please design the test plan", team)
    assert decision.agents == ("developer",)
    assert decision.reason is RouteReason.MENTION


def test_mention_by_name_case_insensitive(team):
    """A display name mentions its agent, in any case, with or without its spaces."""
    assert find_mentions("@ARCHITECT and @Tester", team) == ("architect", "tester")
    assert find_mentions("ping @qalead", team) == ("qa-lead",)
    assert find_mentions("ping @QA Lead", team) == ("qa-lead",)
    assert find_mentions("ping @qa-lead.", team) == ("qa-lead",)


def test_mentions_in_order_without_duplicates(team):
    """Mentions come back in order of first appearance, each once."""
    text = "@tester, @architect: ask @Tester again"
    assert find_mentions(text, team) == ("tester", "architect")


def test_email_is_not_a_mention(team):
    """An address like bob@architect.io mentions nobody."""
    assert find_mentions("mail bob@architect.io or alice@tester", team) == ()
    assert route("mail bob@architect.io", team).reason is RouteReason.DEFAULT


def test_mention_must_end_at_word_end(team):
    """``@testers`` or ``@tester_x`` is not a mention of ``tester``."""
    assert find_mentions("@testers @tester_x @developer2", team) == ()


def test_mention_next_to_cjk_text(team):
    """Chinese text around a mention does not hide it: there are no spaces in Chinese."""
    assert find_mentions("请@architect看一下这个方案", team) == ("architect",)


def test_unknown_mention_ignored(team):
    """A mention of nobody on the team falls through to the rules."""
    decision = route("@nobody can you test this?", team)
    assert decision.agents == ("tester",)
    assert decision.reason is RouteReason.RULE


def test_mention_beats_rules(team):
    """Explicit mentions win over any matching rule."""
    decision = route("found a bug, @architect @developer", team)
    assert decision.agents == ("architect", "developer")
    assert decision.reason is RouteReason.MENTION
    assert "@architect" in decision.detail


def test_highest_priority_rule_wins(team):
    """When several rules match, the one with the highest priority decides."""
    decision = route("design the code and test it", team)
    assert decision.agents == ("tester",)
    assert decision.reason is RouteReason.RULE
    assert decision.rule == "tester#0"
    assert decision.keywords_hit == ("test",)
    assert "priority 60" in decision.detail


def test_priority_ties_go_to_agent_then_rule_order():
    """Equal priorities fall back to agent order, then rule order within an agent."""
    agents = (
        agent("alpha", rule("alpha", name="a2", keywords=("y",), priority=5)),
        agent(
            "beta",
            rule("beta", name="b1", keywords=("x",), priority=5),
            rule("beta", name="b2", keywords=("x",), priority=5),
        ),
    )
    assert route("x y", agents).rule == "a2"
    assert route("x", agents).rule == "b1"


def test_rule_can_name_several_agents():
    """A rule may route to several agents, in the order it lists them."""
    agents = (
        agent("tester"),
        agent("developer", rule("tester", "developer", name="release", keywords=("release",))),
    )
    decision = route("release tomorrow?", agents)
    assert decision.agents == ("tester", "developer")
    assert decision.rule == "release"


def test_rule_naming_unknown_agents_only_is_skipped():
    """A rule whose agents are all unknown never routes to them."""
    agents = (agent("one", default=True), agent("two", rule("ghost", keywords=("x",))))
    assert route("x", agents).agents == ("one",)


def test_keywords_match_whole_english_words(team):
    """ASCII keywords match on word boundaries: "test" is not in "latest"."""
    assert route("the latest attestation", team).reason is RouteReason.DEFAULT
    assert route("Test it, please", team).agents == ("tester",)
    assert route("a bug-report", team).agents == ("tester",)


def test_cjk_keywords_match_as_substrings(team):
    """Chinese keywords match anywhere, and English keywords inside Chinese text match too."""
    assert route("请帮我做一下测试吧", team).agents == ("tester",)
    assert route("这个架构合理吗", team).agents == ("architect",)
    assert route("帮我写个test吧", team).agents == ("tester",)


def test_multi_word_keyword_allows_any_spacing():
    """A keyword with spaces matches across any run of whitespace."""
    agents = (agent("tester", rule("tester", keywords=("unit test",))), agent("other"))
    assert route("write a Unit\n  Test", agents).agents == ("tester",)
    assert route("unit testing", agents).reason is RouteReason.DEFAULT


def test_multi_word_keyword_found_after_a_match_inside_a_word():
    """A keyword matched inside a longer word earlier still counts where it stands whole."""
    agents = (agent("tester", rule("tester", keywords=("unit test",))), agent("other"))
    assert route("the junit test, then a unit test", agents).agents == ("tester",)
    assert route("the junit tests", agents).reason is RouteReason.DEFAULT


def test_patterns_are_case_insensitive_regexes():
    """Patterns use re.search with IGNORECASE; keywords and patterns must both hold."""
    agents = (
        agent("other", default=True),
        agent("architect", rule("architect", patterns=(r"\bapi\b",))),
        agent("both", rule("both", keywords=("v2",), patterns=(r"\bREST\b",), priority=9)),
    )
    decision = route("Design the API", agents)
    assert decision.agents == ("architect",)
    assert decision.keywords_hit == ()
    assert r"\bapi\b" in decision.detail
    assert route("REST v2 API", agents).agents == ("both",)
    assert route("REST API", agents).agents == ("architect",)
    assert route("rapid", agents).agents == ("other",)


def test_length_rule_counts_characters_not_bytes():
    """A 10-character Chinese message (30 UTF-8 bytes) fits a max_length of 12."""
    text = "你好请问今天谁在值班"
    assert len(text) == 10
    assert len(text.encode()) == 30
    agents = (
        agent("other", default=True),
        agent("receptionist", rule("receptionist", name="short", max_length=12)),
    )
    decision = route(f"  {text}\n", agents)
    assert decision.agents == ("receptionist",)
    assert decision.rule == "short"
    assert "10 characters" in decision.detail
    assert route(text * 2, agents).reason is RouteReason.DEFAULT


def test_min_length_bound():
    """A min_length rule ignores shorter messages."""
    agents = (agent("other"), agent("long", rule("long", min_length=20)))
    assert route("x" * 19, agents).agents == ("other",)
    assert route("x" * 20, agents).agents == ("long",)


def test_default_agent_fallback(team):
    """With no mention and no rule, the default agent answers, else the first."""
    assert route("what a day", team).agents == ("receptionist",)
    marked = (agent("first"), agent("second", default=True))
    decision = route("what a day", marked)
    assert decision.agents == ("second",)
    assert decision.reason is RouteReason.DEFAULT
    assert decision.rule is None


def test_route_needs_agents():
    """Routing among no agents is a programming error."""
    with pytest.raises(ValueError, match="no agents"):
        route("hello", ())


def test_router_matches_module_functions(team):
    """A Router built once decides exactly like the module-level functions."""
    router = Router(team)
    for text in ("@tester hi", "design it", "hello", "nothing"):
        assert router.route(text) == route(text, list(team))


def test_handoff_excludes_author(team):
    """A reply hands the turn to those it mentions, never back to its own author."""
    reply = "@developer please fix this; @tester will verify. — @architect"
    assert handoff_targets(reply, "architect", team) == ("developer", "tester")
    assert handoff_targets("I'll take it myself, @tester", "tester", team) == ()
    assert handoff_targets("no mentions here", "tester", team) == ()


def test_shipped_agents_route_sensibly():
    """The shipped agent files send typical requests to the expected colleague."""
    agents = shipped()
    expected = {
        "hi": ("receptionist",),
        "大家好 今天有人在吗": ("receptionist",),
        "Can you design the architecture for our chat service?": ("architect",),
        "请帮我设计一个微服务架构": ("architect",),
        "please implement the login endpoint": ("developer",),
        "帮我实现一个函数": ("developer",),
        "please fix the bug in the login form": ("developer",),
        "write unit tests for the parser": ("tester",),
        "请写测试用例": ("tester",),
        "I found a bug: the page crashes": ("tester",),
        "we release tomorrow": ("tester", "developer"),
    }
    for text, agents_expected in expected.items():
        assert route(text, agents).agents == agents_expected, text


@settings(max_examples=300, deadline=None, database=None)
@given(text=st.text())
def test_route_never_raises(text):
    """Any text routes to at least one known agent, without raising."""
    agents = shipped()
    known = {a.id for a in agents}
    decision = route(text, agents)
    assert decision.agents
    assert set(decision.agents) <= known
    assert len(set(decision.agents)) == len(decision.agents)


@settings(max_examples=200, deadline=None, database=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("@ .,:;-_\n测试abcdeinorstvlpAT")) | st.characters(),
        max_size=80,
    )
)
def test_mentions_are_known_and_unique(text):
    """find_mentions only ever returns known agent ids, each once."""
    agents = shipped()
    mentions = find_mentions(text, agents)
    assert set(mentions) <= {a.id for a in agents}
    assert len(set(mentions)) == len(mentions)


_CJK_BOUNDARY = (
    "[^\\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]"
)
_keyword_texts = st.text(alphabet=st.sampled_from(list("abtesTE测试 _-+")), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None, database=None)
@given(
    keyword=_keyword_texts.filter(lambda k: k.strip()),
    text=st.text(alphabet=st.sampled_from(list("abtesTE测试 _-+\n.é@")), max_size=40),
)
def test_keyword_matching_agrees_with_plain_regex(keyword, text):
    """The fast keyword matcher agrees with a straightforward regex over the folded text."""
    parts = [re.escape(part) for part in keyword.casefold().split()]
    source = r"\s+".join(parts)
    if keyword.isascii():
        if re.match(_CJK_BOUNDARY, keyword.strip()[0]):
            source = f"(?<!{_CJK_BOUNDARY})" + source
        if re.match(_CJK_BOUNDARY, keyword.strip()[-1]):
            source += f"(?!{_CJK_BOUNDARY})"
    expected = re.search(source, text.casefold()) is not None
    agents = (agent("other"), agent("keen", rule("keen", keywords=(keyword,))))
    decision = Router(agents).route(text)
    assert (decision.agents == ("keen",)) is expected
    assert decision.keywords_hit == ((keyword,) if expected else ())


def test_a_colleague_named_as_whom_to_ask_next_is_not_asked_now():
    """ "@developer …, then ask @tester to check it" goes to the developer only (the tester is
    asked by the developer's hand-off); named alone, the one to ask is asked."""
    team = shipped()
    first = route("@developer create hello.py, then ask @tester to check it", team)
    assert first.agents == ("developer",)
    assert first.detail == "mentioned @developer; @tester to be asked next"
    assert route("@developer fix it and please ask @tester to verify", team).agents == (
        "developer",
    )
    assert route("then ask @tester to check it", team).agents == ("tester",)
    assert route("@tester and @developer", team).agents == ("tester", "developer")
    assert route("ask @tester, then ask @developer", team).agents == ("tester",)
