"""The console's lore API against a real uvicorn server and a real SQLite file: an entry added
for a group goes to the group's lorebook (made on first use, trusted, read by the group), is
listed with its owner, keys, pattern and tokens, and is removed; every bad input is refused
with a one-line reason and makes no lorebook; a lorebook of another owner, or a source that is
not a lorebook, is a 409. An entry is edited in place (PATCH), checked as a new one is: a
refused edit leaves it as it was, and the next turn's context has the new text."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest


@pytest.fixture
def group() -> str:
    return f"lore-{uuid.uuid4().hex[:10]}"


def _add(api: httpx.Client, **body: Any) -> httpx.Response:
    return api.post("/api/knowledge/lore", json=body)


def _sources(api: httpx.Client) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in api.get("/api/knowledge/sources").json()["sources"]}


def test_an_entry_is_added_listed_and_removed(api: httpx.Client, group: str):
    made = _add(
        api,
        text="  The deploy freeze starts on Friday at noon.  ",
        keys=["deploy", " freeze window ", "Deploy"],
        pattern=r"release\s+train",
        priority=80,
        group=group,
    )
    assert made.status_code == 201, made.text
    entry = made.json()
    book = f"lore-{group}"
    assert entry["book"] == book
    assert entry["owner"] == f"group {group}"
    assert entry["keys"] == ["deploy", "freeze window"]
    assert entry["pattern"] == r"release\s+train"
    assert entry["priority"] == 80
    assert entry["text"] == "The deploy freeze starts on Friday at noon."
    assert entry["tokens"] > 0
    source = _sources(api)[book]
    assert source["kind"] == "lore"
    assert source["trust"] == "trusted"
    assert source["owner"] == f"group {group}"

    second = _add(api, text="Pings are answered with pong.", keys=["ping"], agent="ping")
    assert second.status_code == 201, second.text
    assert second.json()["book"] == "lore-ping"
    assert second.json()["owner"] == "agent ping"
    assert second.json()["priority"] == 50
    everyone = _add(api, text="The office is in Lyon.", pattern="office", everyone=True)
    assert everyone.status_code == 201, everyone.text
    assert everyone.json()["book"] == "lore"
    assert everyone.json()["keys"] == []

    listed = api.get("/api/knowledge/lore")
    assert listed.status_code == 200
    rows = {row["id"]: row for row in listed.json()["entries"]}
    assert rows[entry["id"]] == entry
    assert rows[second.json()["id"]]["owner"] == "agent ping"

    gone = api.delete(f"/api/knowledge/lore/{entry['id']}")
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"id": entry["id"], "note": f"removed lore entry {entry['id']}"}
    ids = {row["id"] for row in api.get("/api/knowledge/lore").json()["entries"]}
    assert entry["id"] not in ids
    again = api.delete(f"/api/knowledge/lore/{entry['id']}")
    assert again.status_code == 404
    assert again.json() == {"error": f"no lore entry {entry['id']}"}
    assert api.delete("/api/knowledge/lore/not-a-number").status_code == 422


def test_bad_entries_are_refused_and_make_no_book(api: httpx.Client, group: str):
    cases: list[tuple[dict[str, Any], str]] = [
        ({"text": "a fact"}, "keys: give at least one key or a pattern"),
        ({"text": "a fact", "keys": ["", "  "]}, "keys: give at least one key or a pattern"),
        ({"text": "a fact", "keys": ["x" * 81]}, "keys: a key is at most 80 characters"),
        ({"text": "a fact", "pattern": "(a+)+"}, "pattern: a repeated group that itself repeats"),
        ({"text": "a fact", "pattern": "(unclosed"}, "pattern: not a regular expression"),
        ({"text": "a fact", "pattern": "x" * 201}, "pattern: at most 200 characters"),
        ({"text": "a fact", "keys": ["k"], "priority": 101}, "priority: must be within 0..100"),
        ({"text": "a fact", "keys": ["k"], "priority": -1}, "priority: must be within 0..100"),
        ({"text": "a fact", "keys": ["k"], "priority": "high"}, "priority: "),
        ({"text": "   ", "keys": ["k"]}, "text: must be 1 to 2000 characters"),
        ({"text": "y" * 2001, "keys": ["k"]}, "text: must be 1 to 2000 characters"),
        ({"keys": ["k"]}, "text: Field required"),
        ({"text": "a fact", "keys": ["k"], "book": "Bad Name"}, "book: "),
    ]
    for body, words in cases:
        response = _add(api, group=group, **body)
        assert response.status_code == 422, (body, response.text)
        assert words in response.json()["error"], (body, response.json())
        assert "\n" not in response.json()["error"]
    assert f"lore-{group}" not in _sources(api)

    owners: list[tuple[dict[str, Any], str]] = [
        ({}, "say who may read it"),
        ({"group": group, "everyone": True}, "say who may read it"),
        ({"group": "../etc"}, "group"),
        ({"agent": "nobody"}, "agent: no agent 'nobody'"),
    ]
    for owner, words in owners:
        response = _add(api, text="a fact", keys=["k"], **owner)
        assert response.status_code == 422, (owner, response.text)
        assert words in response.json()["error"], (owner, response.json())
    assert "lore-nobody" not in _sources(api)


def test_a_lorebook_is_read_by_one_owner(api: httpx.Client, group: str):
    book = f"book-{uuid.uuid4().hex[:8]}"
    made = _add(api, text="For the group.", keys=["k"], group=group, book=book)
    assert made.status_code == 201, made.text
    clash = _add(api, text="For ping.", keys=["k"], agent="ping", book=book)
    assert clash.status_code == 409
    assert clash.json()["error"] == (
        f"lorebook {book!r} is read by group {group}, not agent ping: choose another book"
    )
    uploaded = api.post(
        "/api/knowledge/uploads",
        files=[("files", ("a.md", b"# a\n", "text/markdown"))],
        data={"group": group},
    )
    assert uploaded.status_code == 201, uploaded.text
    not_lore = _add(api, text="Into uploads.", keys=["k"], group=group, book=f"uploads-{group}")
    assert not_lore.status_code == 409
    assert "not a lorebook" in not_lore.json()["error"]
    entries = [e for e in api.get("/api/knowledge/lore").json()["entries"] if e["book"] == book]
    assert [e["text"] for e in entries] == ["For the group."]


def test_a_lore_body_over_its_limit_is_refused(api: httpx.Client, group: str):
    response = _add(api, text="z" * (64 * 1024), keys=["k"], group=group)
    assert response.status_code == 413
    assert response.json()["error"].startswith("lore: ")


def test_an_entry_is_edited_in_place(api: httpx.Client, group: str):
    made = _add(api, text="Deploys on Tuesdays.", keys=["deploy"], priority=60, group=group)
    assert made.status_code == 201, made.text
    entry = made.json()
    url = f"/api/knowledge/lore/{entry['id']}"
    asked = {"agent": "ping", "group": group, "message": "@ping deploy today?"}
    assert "Deploys on Tuesdays." in api.get("/api/context", params=asked).text

    edited = api.patch(url, json={"text": "  Deploys on Wednesdays, after the review.  "})
    assert edited.status_code == 200, edited.text
    assert edited.json() == {
        **entry,
        "text": "Deploys on Wednesdays, after the review.",
        "tokens": edited.json()["tokens"],
    }
    assert edited.json()["tokens"] > entry["tokens"]
    moved = api.patch(
        url, json={"keys": ["ship", " release "], "pattern": r"\bv\d+", "priority": 90}
    )
    assert moved.status_code == 200, moved.text
    assert (moved.json()["keys"], moved.json()["pattern"], moved.json()["priority"]) == (
        ["ship", "release"],
        r"\bv\d+",
        90,
    )
    assert moved.json()["owner"] == f"group {group}"
    assert api.patch(url, json={"keys": []}).json()["keys"] == []
    dropped = api.patch(url, json={"keys": ["deploy"], "pattern": None})
    assert (dropped.json()["keys"], dropped.json()["pattern"]) == (["deploy"], None)
    listed = {row["id"]: row for row in api.get("/api/knowledge/lore").json()["entries"]}
    assert listed[entry["id"]] == dropped.json()

    context = api.get("/api/context", params=asked)  # at once: the console's shelf rereads
    assert context.status_code == 200, context.text
    assert "Deploys on Wednesdays, after the review." in context.text
    assert "Deploys on Tuesdays." not in context.text


def test_a_bad_edit_is_refused_and_keeps_the_entry(api: httpx.Client, group: str):
    entry = _add(api, text="Deploys on Tuesdays.", keys=["deploy"], group=group).json()
    url = f"/api/knowledge/lore/{entry['id']}"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"pattern": "(a+)+"}, "pattern: a repeated group that itself repeats"),
        ({"pattern": "(unclosed"}, "pattern: not a regular expression"),
        ({"keys": []}, "keys: give at least one key or a pattern"),
        ({"keys": ["", " "], "pattern": ""}, "keys: give at least one key or a pattern"),
        ({"keys": ["x" * 81]}, "keys: a key is at most 80 characters"),
        ({"priority": 101}, "priority: must be within 0..100"),
        ({"priority": None}, "priority: must not be null"),
        ({"priority": "high"}, "priority: "),
        ({"text": "   "}, "text: must be 1 to 2000 characters"),
        ({"text": "y" * 2001}, "text: must be 1 to 2000 characters"),
        ({"text": None}, "text: must not be null"),
        ({}, "edit: nothing to change"),
        ({"book": "elsewhere"}, "book: Extra inputs are not permitted"),
    ]
    for body, words in cases:
        response = api.patch(url, json=body)
        assert response.status_code == 422, (body, response.text)
        assert words in response.json()["error"], (body, response.json())
        assert "\n" not in response.json()["error"]
    rows = {row["id"]: row for row in api.get("/api/knowledge/lore").json()["entries"]}
    assert rows[entry["id"]] == entry

    gone = api.patch("/api/knowledge/lore/999999", json={"text": "Nowhere."})
    assert gone.status_code == 404
    assert gone.json() == {"error": "no lore entry 999999"}
    assert api.patch("/api/knowledge/lore/x", json={"text": "t"}).status_code == 422
    too_big = api.patch(url, json={"text": "z" * (64 * 1024)})
    assert too_big.status_code == 413
