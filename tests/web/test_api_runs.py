"""``/api/runs`` against a real console (uvicorn, Redis, SQLite) behind a token: the runs as
`arena runs --json` and `arena run show --json` print them, and asking one to stop, on runs
written straight through ``RunStore``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.memory.runs import RunStore
from tests.runs_seed import SeededRuns, seed_runs
from tests.web_helpers import Served, served_console

TOKEN = "t0ken-" + uuid.uuid4().hex
BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_console(tmp_path_factory.mktemp("web-runs-api"), web_token=TOKEN) as served:
        yield served


@pytest.fixture
def api(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.base, headers=BEARER, timeout=20) as client:
        yield client


@pytest.fixture
def seeded(served: Served) -> SeededRuns:
    """Four runs of a group of their own: done, failed, running, queued."""
    return seed_runs(served.engine, f"room-{uuid.uuid4().hex[:10]}")


def _group(seeded: SeededRuns) -> str:
    return seeded.done.split("-1:")[0]


def _cli_json(served: Served, *args: str) -> object:
    """What `arena ARGS --json` prints for the console's arena, parsed."""
    env = {
        "ARENA_DATA_DIR": str(served.settings.data_dir),
        "ARENA_AGENTS_DIR": str(served.settings.agents_dir),
        "ARENA_WORKSPACES_DIR": str(served.settings.workspaces_dir),
    }
    shown = CliRunner().invoke(main, [*args, "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.output)


def test_list_a_groups_runs_newest_first_as_the_cli_does(
    api: httpx.Client, served: Served, seeded: SeededRuns
):
    """GET /api/runs?group= lists the group's runs, newest first, as `arena runs --json`;
    `limit` keeps the newest."""
    group = _group(seeded)
    response = api.get("/api/runs", params={"group": group})
    assert response.status_code == 200, response.text
    runs = response.json()["runs"]
    assert [r["id"] for r in runs] == [seeded.queued, seeded.running, seeded.failed, seeded.done]
    assert runs == _cli_json(served, "runs", group)
    assert runs[-1]["outcome"]["cost_usd"] == 0.0123
    newest = api.get("/api/runs", params={"group": group, "limit": 1}).json()["runs"]
    assert [r["id"] for r in newest] == [seeded.queued]
    everyone = [r["id"] for r in api.get("/api/runs", params={"limit": 1000}).json()["runs"]]
    assert seeded.done in everyone


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"group": "Not A Group!"}, "group: 'Not A Group!' is not a valid group id"),
        ({"limit": 0}, "query.limit: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_filter_is_422_in_one_line(api: httpx.Client, params: dict[str, object], error: str):
    """A malformed group or limit: 422 with the reason."""
    response = api.get("/api/runs", params=params)
    assert response.status_code == 422
    assert response.json()["error"].startswith(error)


def test_one_run_with_its_steps_as_the_cli_shows_it(
    api: httpx.Client, served: Served, seeded: SeededRuns
):
    """GET /api/runs/{id}: the run, what it changed, and its steps in order, as
    `arena run show --json`."""
    response = api.get(f"/api/runs/{seeded.done}")
    assert response.status_code == 200, response.text
    run = response.json()
    assert run == _cli_json(served, "run", "show", seeded.done)
    assert run["status"] == "done"
    assert run["outcome"]["commit"].startswith("0123456789ab")
    assert [(s["n"], s["kind"], s["is_error"]) for s in run["steps"]] == [
        (1, "tool", False),
        (2, "tool", False),
        (3, "result", True),
        (4, "text", False),
    ]


def test_an_unknown_run_is_404(api: httpx.Client):
    """No such run, to read or to cancel: 404 with the one-line error."""
    assert api.get("/api/runs/nope:1:ping").json() == {"error": "no run nope:1:ping"}
    assert api.get("/api/runs/nope:1:ping").status_code == 404
    cancel = api.post("/api/runs/nope:1:ping/cancel")
    assert (cancel.status_code, cancel.json()) == (404, {"error": "no run nope:1:ping"})


def test_cancel_a_queued_and_a_running_run(api: httpx.Client, served: Served, seeded: SeededRuns):
    """POST /api/runs/{id}/cancel: 202 and what happens now; the run is marked for its
    worker."""
    queued = api.post(f"/api/runs/{seeded.queued}/cancel")
    assert queued.status_code == 202, queued.text
    assert queued.json() == {
        "id": seeded.queued,
        "status": "queued",
        "detail": f"run {seeded.queued} was queued: it will not start",
    }
    running = api.post(f"/api/runs/{seeded.running}/cancel")
    assert running.status_code == 202, running.text
    assert running.json()["detail"] == f"run {seeded.running} is running: it stops within seconds"
    runs = RunStore(served.engine)
    for run_id in (seeded.queued, seeded.running):
        run = runs.get(run_id)
        assert run is not None
        assert run.cancel_requested
    assert api.get(f"/api/runs/{seeded.running}").json()["cancel_requested"] is True


def test_cancel_a_run_that_ended_is_409_and_changes_nothing(
    api: httpx.Client, served: Served, seeded: SeededRuns
):
    """A run that already ended has nothing to cancel: 409 with why, the run as it was."""
    before = RunStore(served.engine).get(seeded.failed)
    response = api.post(f"/api/runs/{seeded.failed}/cancel")
    assert response.status_code == 409
    assert response.json() == {
        "error": f"run {seeded.failed} already ended (failed): nothing to cancel"
    }
    assert RunStore(served.engine).get(seeded.failed) == before


def test_cancel_needs_the_token_and_the_consoles_own_origin(served: Served, seeded: SeededRuns):
    """Without the token, or from another site, a cancel is refused and nothing changes."""
    path = f"/api/runs/{seeded.running}/cancel"
    with httpx.Client(base_url=served.base, timeout=20) as client:
        assert client.post(path).status_code == 401
        assert client.get("/api/runs").status_code == 401
        cross = client.post(path, headers={**BEARER, "origin": "https://evil.example"})
        assert cross.status_code == 403
    run = RunStore(served.engine).get(seeded.running)
    assert run is not None
    assert not run.cancel_requested
