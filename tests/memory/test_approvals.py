"""The requests and allow-lists as kept: one request per call while it waits, the first
decision wins, "always" fills the allow-list, an approval is used once, expiry and what a
run has not been told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Engine

from orchestrator.core.approvals import Ask, binding
from orchestrator.memory.approvals import ApprovalStore

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ASK = Ask(kind="tool", tool="Bash", input={"command": "rm -rf build"}, cwd="/ws",
          reason="deletes files", pattern="Bash(rm -rf build)")  # fmt: skip


def _request(store: ApprovalStore, run: str = "m:1:coder", ask: Ask = ASK):
    return store.request(run_id=run, group="team", agent="coder", ask=ask, why="tidy up",
                         decider="user", now=NOW, expires_in=timedelta(minutes=30))  # fmt: skip


def test_asking_twice_for_one_call_is_one_request(engine: Engine):
    store = ApprovalStore(engine)
    first, made = _request(store)
    again, made_again = _request(store)
    assert made
    assert not made_again
    assert again.id == first.id
    assert first.id.startswith("ap-")
    assert len(first.id) == 13
    assert first.expires_at == NOW + timedelta(minutes=30)
    other, _ = _request(store, run="m:2:coder")
    assert other.id != first.id  # another run: another request


def test_the_first_decision_wins_and_always_fills_the_allow_list(engine: Engine):
    store = ApprovalStore(engine)
    record, _ = _request(store)
    decided = store.decide(record.id, approve=True, by="user", note="ok", always=True, now=NOW)
    assert decided is not None
    assert decided.now
    assert decided.record.state == "approved"
    assert decided.record.always
    late = store.decide(record.id, approve=False, by="user", note="no", always=False, now=NOW)
    assert late is not None
    assert not late.now
    assert late.record.state == "approved"
    assert late.record.note == "ok"
    assert [r.pattern for r in store.allowed("coder")] == ["Bash(rm -rf build)"]
    assert store.disallow("coder", "Bash(rm -rf build)")
    assert not store.disallow("coder", "Bash(rm -rf build)")
    assert store.decide("ap-0000000000", approve=True, by="user", note=None, always=False,
                        now=NOW) is None  # fmt: skip


def test_an_approval_is_used_once_and_a_denial_never(engine: Engine):
    store = ApprovalStore(engine)
    record, _ = _request(store)
    bound = binding("m:1:coder", ASK)
    assert store.use("m:1:coder", bound) is None  # pending: nothing to use
    store.decide(record.id, approve=True, by="user", note=None, always=False, now=NOW)
    assert store.use("m:1:coder", bound) is not None
    assert store.use("m:1:coder", bound) is None
    denied, _ = _request(store, run="m:3:coder")
    store.decide(denied.id, approve=False, by="user", note=None, always=False, now=NOW)
    assert store.use("m:3:coder", binding("m:3:coder", ASK)) is None


def test_overdue_requests_expire_once_and_the_run_hears_each_end_once(engine: Engine):
    store = ApprovalStore(engine)
    record, _ = _request(store)
    assert store.overdue(NOW + timedelta(minutes=29)) == []
    assert [r.id for r in store.overdue(NOW + timedelta(minutes=31))] == [record.id]
    closed = store.close(record.id, "expired", by="arena", now=NOW)
    assert closed is not None
    assert closed.now
    assert closed.record.state == "expired"
    assert store.close(record.id, "orphaned", by="arena", now=NOW).now is False  # type: ignore[union-attr]
    assert [r.id for r in store.untold("m:1:coder")] == [record.id]
    store.mark_told(record.id)
    assert store.untold("m:1:coder") == []
