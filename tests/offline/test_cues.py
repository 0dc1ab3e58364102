"""Which sentences state a decision or a requirement: shared by the offline reply and summary."""

from __future__ import annotations

import pytest

from orchestrator.background.summary import run_summary
from orchestrator.offline import cues
from orchestrator.offline.model import OfflineProvider
from tests.background.test_summary import NOW, _say
from tests.offline.test_model import request_for


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We decided to use Python 3.12.", "decision"),
        ("Let's go with PostgreSQL.", "decision"),
        ("The API must be fast.", "requirement"),
        ("The app must have an offline mode.", "requirement"),
        ("We need a cache for sessions.", "requirement"),
        ("That must have been awesome.", None),
        ("Must have been traumatizing for you guys.", None),
        ("You must've been so proud!", None),
        ("It must be so exciting to move.", None),
        ("They must feel relieved.", None),
        ("You must really love seeing them grow.", None),
        ("Must have taken a lot of work.", None),
        ("I can imagine that must be challenging.", None),
        ("I can only imagine how tough it must be.", None),
        ("Passwords must be hashed with argon2.", "requirement"),
        ("That must be hard. We must ship by Friday.", "requirement"),
        ("Do we need a cache?", None),
        ("Have we decided to use Redis?!", None),
    ],
)
def test_what_a_message_states(text, expected):
    """Obligations and decisions count; guesses with "must" and questions do not."""
    found = [cues.states(s, question=q) for s, q in cues.sentences(text)]
    assert next((kind for kind in found if kind), None) == expected


def test_sentences_keep_numbers_and_tell_questions():
    """A dot inside a number does not end a sentence; each sentence says whether it asks."""
    assert cues.sentences("Use v1.2 now. Is it out?\nYes 决定了。好吗\uff1f") == [
        ("Use v1.2 now.", False),
        ("Is it out?", True),
        ("Yes 决定了。", False),
        ("好吗\uff1f", True),
    ]


async def test_offline_reply_saves_no_guess_as_a_requirement():
    """Small talk with "must have been" saves nothing; a real requirement beside it is saved."""
    async with OfflineProvider() as provider:
        chat = await provider.complete(request_for("That must have been hard. Do we need a VPN?"))
        work = await provider.complete(request_for("That must be tough. Pages must load fast."))
    assert "SAVE_MEMORY" not in chat.text
    assert work.text.count("SAVE_MEMORY") == 1
    assert '"content": "Pages must load fast"' in work.text


async def test_summary_keeps_no_small_talk(settings, engine):
    """The offline summary's sections hold what was stated, not sympathy or questions."""
    _say(engine, 0, "We are planning the clinic's booking site together.")
    _say(engine, 1, "That must have been awesome! Can you tell me more about it?")
    _say(engine, 2, "Have you finished the mockups? We must support mobile.")
    _say(engine, 3, "What are you working on? I'm working on the calendar view.")
    outcome = await run_summary(settings, engine, OfflineProvider(), "team", None, "messages", NOW)
    assert outcome.status == "written"
    text = (settings.data_dir / "memory" / "summary_team.md").read_text(encoding="utf-8")
    assert "We must support mobile." in text
    assert "I'm working on the calendar view." in text
    for noise in ("must have been awesome", "tell me more", "finished the mockups", "What are"):
        assert noise not in text
