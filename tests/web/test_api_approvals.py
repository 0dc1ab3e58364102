"""``/api/approvals`` and ``/api/allow`` against a real console (uvicorn, Redis, SQLite)
behind a token: the runs' requests listed and read, approved (once or always) and denied as
the console's person, a second decision refused with the first, the allow-lists read and an
entry removed; requests written straight through ``ApprovalStore``, as a run asks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from orchestrator.core.coding import Step, steps_stream
from orchestrator.memory.approvals import ApprovalStore
from orchestrator.memory.db import make_engine
from tests.approvals_seed import ask
from tests.web_helpers import Served, console_server, console_settings, served_console

TOKEN = "t0ken-" + uuid.uuid4().hex
BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_console(
        tmp_path_factory.mktemp("web-approvals-api"), web_token=TOKEN, owner="alex"
    ) as served:
        yield served


@pytest.fixture
def api(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.base, headers=BEARER, timeout=20) as client:
        yield client


@pytest.fixture
def group() -> str:
    return f"room-{uuid.uuid4().hex[:10]}"


def _stored(served: Served, approval_id: str):
    found = ApprovalStore(served.engine).get(approval_id)
    assert found is not None
    return found


def test_list_a_groups_pending_requests_newest_first(api: httpx.Client, served: Served, group: str):
    """GET /api/approvals?group= lists the group's pending requests, newest first; state=all
    adds the decided ones; `limit` keeps the newest."""
    first = ask(served.engine, group, "rm -rf build")
    second = ask(served.engine, group, "git push origin main", reason="pushes")
    decided = ask(served.engine, group, "rm old.log")
    ApprovalStore(served.engine).close(decided.id, "cancelled", by="ping", now=decided.created_at)
    response = api.get("/api/approvals", params={"group": group})
    assert response.status_code == 200, response.text
    listed = response.json()["approvals"]
    assert [a["id"] for a in listed] == [second.id, first.id]
    assert listed[0]["input"]["command"] == "git push origin main"
    assert listed[0]["reason"] == "pushes"
    everything = api.get("/api/approvals", params={"group": group, "state": "all"}).json()
    assert {a["id"] for a in everything["approvals"]} == {first.id, second.id, decided.id}
    newest = api.get("/api/approvals", params={"group": group, "limit": 1}).json()["approvals"]
    assert [a["id"] for a in newest] == [second.id]


def test_one_request_with_what_and_why(api: httpx.Client, served: Served, group: str):
    """GET /api/approvals/{id}: the tool, its full input, the cwd, the reason, the agent's
    last words, the pattern, its state and expiry."""
    asked = ask(served.engine, group, "npm install left-pad", pattern="Bash(npm install *)")
    response = api.get(f"/api/approvals/{asked.id}")
    assert response.status_code == 200, response.text
    shown = response.json()
    assert shown == asked.as_dict()
    assert (shown["tool"], shown["cwd"], shown["state"]) == ("Bash", "/work/project", "pending")
    assert shown["pattern"] == "Bash(npm install *)"
    assert shown["why"] == "The build folder is stale; I will remove it."


def test_approve_once_then_a_second_decision_is_409(api: httpx.Client, served: Served, group: str):
    """POST approve decides as the console's person (ARENA_OWNER); a second decision, either
    way, is 409 with who decided first; the allow-list is left alone."""
    asked = ask(served.engine, group, "rm -rf build")
    response = api.post(f"/api/approvals/{asked.id}/approve", json={"always": False})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message"] == f"{asked.id} approved"
    assert (body["approval"]["state"], body["approval"]["decided_by"]) == ("approved", "alex")
    assert _stored(served, asked.id).state == "approved"
    again = api.post(f"/api/approvals/{asked.id}/deny", json={"note": "no"})
    assert again.status_code == 409
    assert again.json()["error"].startswith(f"{asked.id} was already approved by alex at ")
    assert _stored(served, asked.id).state == "approved"
    assert api.get("/api/allow", params={"agent": "ping"}).json()["rules"] == []


def test_deny_with_a_note_announces_it_on_the_runs_card(
    api: httpx.Client, served: Served, group: str
):
    """POST deny keeps the note for the agent and puts the decision on the group's steps
    stream as an approval step of the request (what the run's card shows live)."""
    asked = ask(served.engine, group, "git push origin main", reason="pushes")
    note = "Open a pull request instead"
    response = api.post(f"/api/approvals/{asked.id}/deny", json={"note": note})
    assert response.status_code == 200, response.text
    assert response.json()["approval"]["note"] == note
    stored = _stored(served, asked.id)
    assert (stored.state, stored.decided_by, stored.note) == ("denied", "alex", note)
    with redis.Redis.from_url(served.settings.effective_redis_url, decode_responses=True) as r:
        entries = r.xrange(steps_stream(group))
    steps = [Step.from_fields(fields) for _, fields in entries]
    assert [(s.kind, s.approval, s.run) for s in steps] == [("approval", asked.id, asked.run_id)]
    assert steps[0].line == f"{asked.id} denied by alex: {note}"


def test_always_puts_the_pattern_on_the_allow_list_and_delete_removes_it(
    api: httpx.Client, served: Served, group: str
):
    """Approve with always: the request's pattern goes on its agent's allow-list (GET
    /api/allow shows it); DELETE /api/allow removes it, and a second time is 404."""
    agent = "pong"
    asked = ask(served.engine, group, "npm install left-pad", agent=agent,
                pattern="Bash(npm install *)")  # fmt: skip
    response = api.post(f"/api/approvals/{asked.id}/approve", json={"always": True})
    assert response.status_code == 200, response.text
    assert response.json()["message"] == (
        f"{asked.id} approved; Bash(npm install *) is on {agent}'s allow-list"
    )
    rules = api.get("/api/allow", params={"agent": agent}).json()["rules"]
    assert [(r["agent"], r["pattern"], r["added_by"], r["approval"]) for r in rules] == [
        (agent, "Bash(npm install *)", "alex", asked.id)
    ]
    assert agent in {r["agent"] for r in api.get("/api/allow").json()["rules"]}
    entry = {"agent": agent, "pattern": "Bash(npm install *)"}
    removed = api.request("DELETE", "/api/allow", json=entry)
    assert removed.status_code == 200, removed.text
    assert removed.json()["message"] == f"Bash(npm install *) removed from {agent}'s allow-list"
    assert ApprovalStore(served.engine).allowed(agent) == []
    gone = api.request("DELETE", "/api/allow", json=entry)
    assert (gone.status_code, gone.json()) == (
        404,
        {"error": f"Bash(npm install *) is not on {agent}'s allow-list"},
    )


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("GET", "/api/approvals/ap-0000000000", 404, "no approval ap-0000000000"),
        ("POST", "/api/approvals/ap-0000000000/approve", 404, "no approval ap-0000000000"),
        ("POST", "/api/approvals/ap-0000000000/deny", 404, "no approval ap-0000000000"),
        ("GET", "/api/approvals/nope", 422, "id: 'nope' is not an approval id (ap- and 10 hex)"),
        ("POST", "/api/approvals/AP-XYZ/deny", 422, "id: 'AP-XYZ' is not an approval id"),
        ("GET", "/api/approvals?state=maybe", 422, "state: 'maybe' is not one of pending"),
        ("GET", "/api/approvals?group=Not%20A%20Group!", 422, "group: 'Not A Group!' is not"),
    ],
)
def test_an_unknown_or_malformed_id_is_404_or_422_in_one_line(
    api: httpx.Client, method: str, path: str, status: int, error: str
):
    """No such request: 404; not an id, a state or a group: 422; the reason in one line."""
    response = api.request(method, path)
    assert response.status_code == status, response.text
    assert response.json()["error"].startswith(error)


def test_a_note_over_2000_characters_is_refused(api: httpx.Client, served: Served, group: str):
    """A note too long for the agent: 422, and the request stays pending."""
    asked = ask(served.engine, group)
    response = api.post(f"/api/approvals/{asked.id}/deny", json={"note": "x" * 2001})
    assert response.status_code == 422
    assert response.json()["error"].startswith("note: String should have at most 2000")
    assert _stored(served, asked.id).state == "pending"


def test_a_cross_site_decision_is_refused(served: Served, group: str):
    """A POST that says it comes from another site is refused (403) before it is decided,
    token or not."""
    asked = ask(served.engine, group)
    with httpx.Client(base_url=served.base, timeout=20) as client:
        for headers in (
            {**BEARER, "origin": "https://evil.example"},
            {**BEARER, "sec-fetch-site": "cross-site"},
        ):
            refused = client.post(f"/api/approvals/{asked.id}/approve", headers=headers)
            assert refused.status_code == 403
            assert refused.json() == {"error": "cross-site request refused"}
        entry = {"agent": "ping", "pattern": "Bash(rm -rf build)"}
        delete = client.request(
            "DELETE", "/api/allow", json=entry, headers={**BEARER, "origin": "https://evil.example"}
        )
        assert delete.status_code == 403
    assert _stored(served, asked.id).state == "pending"


def test_a_console_whose_person_is_an_agent_decides_nothing(
    tmp_path: Path, embedded_redis_url: str
):
    """ARENA_OWNER naming an agent: a decision is refused (403 with why), the request stays
    pending."""
    settings = console_settings(tmp_path, embedded_redis_url, owner="ping")
    engine = make_engine(settings.effective_database_url)
    try:
        asked = ask(engine, "room-owner")
        with console_server(settings) as base:
            refused = httpx.post(f"{base}/api/approvals/{asked.id}/approve", timeout=20)
        assert (refused.status_code, refused.json()) == (
            403,
            {"error": "ping is an agent: agents never decide"},
        )
        stored = ApprovalStore(engine).get(asked.id)
        assert stored is not None
        assert stored.state == "pending"
    finally:
        engine.dispose()
