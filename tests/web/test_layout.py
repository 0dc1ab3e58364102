"""The console's layout in a real headless Chromium: every page, at a desktop's 1,280 px and a
phone's 390 px, with the data that makes pages big (many groups, workers and budget rows, long
ids, names and words), fits its window's width, and no card or panel spills over another.

The pages are listed from the app's routes, so a new page is checked as soon as it exists
(one with a path parameter needs a sample below). A failing test saves its page as a
screenshot under ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest
import redis
from fastapi.routing import APIRoute
from redis import asyncio as aioredis
from rq import Queue, Worker
from rq.serializers import JSONSerializer
from sqlalchemy.engine import Engine

from orchestrator.caps.ledger import CapLedger, Spent
from orchestrator.core.wire import deadletter_stream
from orchestrator.memory.conversation.run_meta import RunMeta
from orchestrator.memory.conversation.store import NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.knowledge.indexer import Indexer
from orchestrator.memory.knowledge.store import KnowledgeStore
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.runs import RunStore, StoredStep
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.memory.versions.store import VersionStore
from orchestrator.settings import Settings
from orchestrator.web.app import create_app
from orchestrator.web.security import COOKIE, Guard
from tests.browser import needs_chromium, save_screenshot
from tests.web_helpers import (
    chat_message,
    console_server,
    console_settings,
    own_redis,
    run_card,
    run_reply,
    store,
)

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium, pytest.mark.timeout(180)]

TOKEN = "layout-token-1"  # with a token, the login page is a page too
LONG_AGENT = "a-very-long-agent-id-" + "x" * 43  # 64 characters, the most an id may have
LONG_GROUP = "a-very-long-group-name-" + "g" * 41
LONG_WORD = "https://example.com/" + "averyveryverylongpathsegment" * 12  # no place to break
WIDTHS = {"desktop": 1280, "phone": 390}

# Path parameters of the pages, and the query that fills a page whose content comes from it.
SAMPLES = {"group": LONG_GROUP, "agent": LONG_AGENT}
LONG_SOURCE = "a-very-long-knowledge-source-name-" + "k" * 30  # 64 characters, the most
QUERIES = {
    "/knowledge": f"?locator={LONG_SOURCE}/notes.md%23L1-4",
    "/context": f"?agent={LONG_AGENT}&group={LONG_GROUP}&message=what+did+we+decide",
    "/memory": f"?group={LONG_GROUP}",
    "/groups": f"?group={LONG_GROUP}",
}
EXTRA_PAGES = ["/agents/nobody"]  # the error page
# What a page shows only once its live events came: waited for too.
LIVE = {f"/groups/{LONG_GROUP}": ".run-steps li"}
_NOT_PAGES = ("/api/", "/metrics", "/openapi.json", "/static")


@dataclass(frozen=True, slots=True)
class Big:
    """The console serving big data: its address and settings."""

    url: str
    settings: Settings


def _long_agent_yaml(agents: Path) -> None:
    (agents / f"{LONG_AGENT}.yaml").write_text(
        f"id: {LONG_AGENT}\n"
        "name: An Agent Whose Name Goes On And On Without End Across The Whole Table\n"
        "role: reviewer of everything anyone ever wrote anywhere in any of the groups\n"
        "model: claude-test-with-a-rather-long-model-name-20260101\n",
        encoding="utf-8",
    )


def _seed_database(settings: Settings) -> None:
    """Groups with long names and words, memories, MEMORY.md versions and refused edits."""
    engine = make_engine(settings.effective_database_url)
    at = datetime.now(UTC) - timedelta(hours=1)
    try:
        for n in range(40):
            group = f"{LONG_GROUP[:-3]}{n:03d}"
            message = chat_message(group, f"{group}-1", "alex", f"see {LONG_WORD}")
            store(engine, [NewReply(message=message)])
        text = f"see {LONG_WORD}\n\n| a | b |\n|---|---|\n| {LONG_WORD} | x |\n\n    {LONG_WORD}"
        store(engine, [NewReply(message=chat_message(LONG_GROUP, "long-1", "alex", text))])
        _seed_runs(engine, at)
        memory = SessionMemory(engine)
        for n in range(5):
            content = f"we decided {n} to keep {LONG_WORD}"
            memory.write(
                NewMemory(
                    scope="session", scope_id=LONG_GROUP, type="decision", content=content, now=at
                )
            )
        versions = VersionStore(engine)
        for n in range(1, 4):
            body = f"- [decision] {n} {LONG_WORD}\n"
            versions.add(
                "memory_md", LONG_AGENT, body, trigger="heartbeat", created_at=at, tokens=9
            )
            versions.record_run(
                "memory_md",
                LONG_AGENT,
                status="rejected",
                trigger="hand edit",
                created_at=at + timedelta(minutes=n),
                reason=f"secret: looks like a credential {LONG_WORD}",
            )
    finally:
        engine.dispose()
    _seed_knowledge(settings)
    folder = settings.workspaces_dir / LONG_AGENT
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "MEMORY.md").write_text(f"- [decision] 3 {LONG_WORD}\n", encoding="utf-8")
    log = PersonalLog(settings.workspaces_dir, settings.zone).path(LONG_AGENT, at.date())
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"- 09:00 [fact] {LONG_WORD} (source: {LONG_GROUP}/long-1)\n", "utf-8")


def _seed_knowledge(settings: Settings) -> None:
    """A knowledge source with a long name, read by the long group, whose file has long words
    and long lines (the page opens one of its locators)."""
    folder = settings.data_dir / "long-kb"
    folder.mkdir(parents=True, exist_ok=True)
    body = f"# {LONG_WORD}\n\nsee {LONG_WORD}\n\n    {LONG_WORD} {LONG_WORD}\n"
    (folder / "notes.md").write_text(body, encoding="utf-8")
    engine = make_engine(settings.effective_database_url)
    try:
        store = KnowledgeStore(engine)
        source = store.add(
            name=LONG_SOURCE, kind="folder", root=folder, scope="group", scope_id=LONG_GROUP,
            trust="external", now=datetime.now(UTC),
        )  # fmt: skip
        Indexer(store).sync(source, now=datetime.now(UTC))
    finally:
        engine.dispose()


def _seed_runs(engine: Engine, at: datetime) -> None:
    """A run that ended, with long file names and a wide diff stat, and one still going whose
    steps are long lines (the room shows them as it opens)."""
    asked = chat_message(LONG_GROUP, "long-2", "alex", f"@{LONG_AGENT} fix {LONG_WORD}")
    card = run_card(asked, LONG_AGENT, f"code rule {LONG_WORD}")
    files = (f"src/{LONG_WORD}.py", "README.md")
    stat = "\n".join(f" {name} | +{n} -0" for n, name in enumerate(files, 1))
    ended = RunMeta(
        id=card.message.id.removesuffix(":run"), status="failed", why="code rule implement",
        files=files, stat=stat, commit="0123456789abcdef", merged=False,
        branch=f"arena/{LONG_WORD}", reason=f"conflict in {LONG_WORD}", turns=9,
    )  # fmt: skip
    store(engine, [NewReply(message=asked), card, run_reply(asked, LONG_AGENT, ended, "Failed")])
    going = chat_message(LONG_GROUP, "long-3", "alex", f"@{LONG_AGENT} add tests")
    second = run_card(going, LONG_AGENT, "code rule implement")
    store(engine, [NewReply(message=going), second])
    runs = RunStore(engine)
    run_id = second.message.id.removesuffix(":run")
    runs.create(run_id=run_id, group=LONG_GROUP, agent=LONG_AGENT, trigger_id=going.id,
                root_id=going.id, hop=1, why="code rule implement", now=at)  # fmt: skip
    for n, line in enumerate((f"Write {LONG_WORD}.py", f"Bash: python3 {LONG_WORD}"), 1):
        runs.add_step(run_id, StoredStep(n=n, at=at, kind="tool", line=line, tool="Bash"))


def _seed_redis(settings: Settings) -> list[Worker]:
    """Budget rows for many agents, groups and models; dead letters; workers with long names
    and many queues (registered: the caller ends them)."""
    url = settings.effective_redis_url
    calls = [
        Spent(
            agent=LONG_AGENT if n % 2 else "helper",
            group=f"{LONG_GROUP[:-3]}{n:03d}",
            model=f"claude-test-model-{n % 6}",
            tokens=500 + 20 * n,
            micro_usd=7_000 * n,
        )
        for n in range(40)
    ]

    async def spend() -> None:
        client = aioredis.Redis.from_url(url)
        try:
            ledger = CapLedger(client, settings.zone)
            for spent in calls:
                await ledger.settle(ledger.unchecked(datetime.now(settings.zone)), spent)
        finally:
            await client.aclose()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, spend()).result(timeout=30)
    connection = redis.Redis.from_url(url)
    for n in range(3):
        connection.xadd(
            deadletter_stream(),
            {
                "entry_id": f"{n + 1}-1",
                "reason": f"model failed: {LONG_WORD}",
                "field:group": LONG_GROUP,
                "field:text": f"try again {LONG_WORD}",
                "field:sender": "someone-with-a-long-sender-name-" + "s" * 30,
            },
        )
    queues = [Queue(f"queue-with-a-long-name-{n}", connection=connection) for n in range(6)]
    workers = [
        Worker(
            queues,
            connection=connection,
            name=f"worker-{n}-on-a-host-with-a-long-name-{'h' * 30}",
            serializer=JSONSerializer,
        )
        for n in range(12)
    ]
    for worker in workers:
        worker.register_birth()
    return workers


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Big]:
    """A console with a token, daily caps and big data (see the module's docstring)."""
    folder = tmp_path_factory.mktemp("web-layout")
    with own_redis(folder / "redis") as url:
        settings = console_settings(
            folder,
            url,
            web_token=TOKEN,
            cap_group_tokens_per_day=1000,
            cap_agent_tokens_per_day=4000,
            cap_group_usd_per_day=1.0,
        )
        _long_agent_yaml(settings.agents_dir)
        _seed_database(settings)
        workers = _seed_redis(settings)
        try:
            with console_server(settings) as base:
                yield Big(base, settings)
        finally:
            for worker in workers:
                worker.register_death()


def _routes(settings: Settings) -> Iterator[Any]:
    """The app's routes, those of the routers it includes too (FastAPI from 0.16x keeps an
    included router whole in ``app.routes``; before, it listed its routes there)."""
    app = create_app(settings)
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    yield from flatten(app.routes) if flatten is not None else app.routes


def _pages(settings: Settings) -> list[str]:
    """Every page the console serves (a GET route outside the API), with its samples filled
    in."""
    pages = []
    for route in _routes(settings):
        if not isinstance(getattr(route, "original_route", route), APIRoute):
            continue
        if "GET" not in (route.methods or ()) or route.path.startswith(_NOT_PAGES):
            continue
        missing = set(route.param_convertors) - set(SAMPLES)
        assert not missing, f"no sample for {missing} of {route.path}: add one to SAMPLES"
        path = re.sub(r"\{(\w+)\}", lambda m: SAMPLES[m.group(1)], route.path)
        pages.append(path + QUERIES.get(route.path, ""))
    return [*pages, *EXTRA_PAGES]


def _loaded(page: Any, url: str) -> None:
    """Open ``url`` and wait until the page's requests to the API have all been answered."""
    page.goto(url)
    page.wait_for_selector("main:not([aria-busy])", state="attached")
    path = url.split("://", 1)[-1].partition("/")[2]
    if f"/{path}" in LIVE:
        page.wait_for_selector(LIVE[f"/{path}"])


# Cards and panels that overlap one another (by more than a pixel; one inside the other is
# not an overlap), or whose content spills out of them over what lies beside: their titles.
_OVERLAPS = """() => {
  const boxes = [...document.querySelectorAll(".card, .panel")];
  const title = (box) => (box.querySelector("h1, h2") || box).textContent.trim().slice(0, 40);
  const hits = boxes.filter((box) => box.scrollWidth > box.clientWidth + 1)
    .map((box) => [title(box), "spills"]);
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b) => {
    if (a.contains(b) || b.contains(a)) return;
    const [p, q] = [a.getBoundingClientRect(), b.getBoundingClientRect()];
    const x = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const y = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (x > 1 && y > 1) hits.push([title(a), title(b)]);
  }));
  return hits;
}"""

# The outermost elements that reach past the window's right edge: the culprits, named.
_WIDEST = """() => {
  const past = (e) => e.getBoundingClientRect().right > window.innerWidth + 1;
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
    (typeof e.className === "string" && e.className ? "." + e.className.split(" ").join(".") : "");
  return [...document.querySelectorAll("body *")]
    .filter((e) => past(e) && !past(e.parentElement)).slice(0, 5).map(name);
}"""


@pytest.fixture
def logged_in(big: Big, browser: Any) -> Iterator[Any]:
    """A page of a browser context that holds the login cookie."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    cookie = Guard(big.settings.web_token).session_value
    context.add_cookies([{"name": COOKIE, "value": cookie, "url": big.url}])
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_no_page_is_wider_than_its_window(big: Big, logged_in: Any, width: int) -> None:
    """At 1,280 and 390 px every page's width is the window's (wide tables scroll in their
    own box), and no two cards overlap."""
    page = logged_in
    page.set_viewport_size({"width": width, "height": 900})
    problems = {}
    for n, path in enumerate(_pages(big.settings)):
        _loaded(page, big.url + path)
        sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        cards = page.evaluate(_OVERLAPS)
        if sizes[0] > sizes[1] or cards:
            problems[path] = {"width": sizes, "cards": cards, "widest": page.evaluate(_WIDEST)}
            save_screenshot(page, f"layout-{width}-{n}")
    assert problems == {}, json.dumps(problems, indent=1)
