"""The documentation's shape: a short README, every page of docs/ reachable from its index, and
no relative link in the README, the changelog or docs/ that leads nowhere."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import main
from tests.arena_helpers import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_BYTES = 10_240

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _linked_files() -> list[Path]:
    return [README, REPO / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def _prose(path: Path) -> str:
    """A Markdown file's text without its fenced blocks and code spans (no links live there)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))


def _links(path: Path) -> list[str]:
    """The targets of a Markdown file's inline links and images."""
    return _LINK.findall(_prose(path))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in {"L", "N", "M"})
    return kept.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, a repeated one numbered as GitHub numbers it."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    for heading in _HEADING.findall(text):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken(path: Path, target: str) -> str | None:
    """Why ``target``, linked from ``path``, leads nowhere; None when it leads somewhere."""
    where, _, anchor = target.partition("#")
    linked = (path.parent / where).resolve() if where else path
    if not linked.exists():
        return "no such file"
    if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
        return f"no heading #{anchor} in {linked.relative_to(REPO)}"
    return None


def test_readme_is_an_introduction() -> None:
    """README.md stays within 10 KiB: the reference lives in docs/."""
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size:,} bytes (at most {README_MAX_BYTES:,})"


def test_relative_links_lead_somewhere() -> None:
    """Every relative link of the README, the changelog and docs/ names a file that exists, and
    a heading of it that exists when it names one."""
    checked = 0
    broken = []
    for path in _linked_files():
        for target in _links(path):
            if _SCHEME.match(target):
                continue
            checked += 1
            if (why := _broken(path, target)) is not None:
                broken.append(f"{path.relative_to(REPO)}: {target} ({why})")
    assert checked > 20  # the links were found
    assert broken == []


def test_the_index_links_every_page() -> None:
    """docs/index.md links every other page of docs/, and the README links the index."""
    linked = {target.partition("#")[0] for target in _links(DOCS / "index.md")}
    pages = {path.name for path in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= linked, f"pages docs/index.md does not link: {sorted(pages - linked)}"
    assert "docs/index.md" in _links(README)


def test_help_names_pages_that_exist() -> None:
    """`arena --help` sends the reader to the page of docs/ that lists the settings."""
    shown = CliRunner().invoke(main, ["--help"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    named = re.findall(r"docs/[\w-]+\.md", text)
    assert named == ["docs/configuration.md"]
    assert all((REPO / page).is_file() for page in named)
    assert "README" not in text


def test_anchors_are_githubs() -> None:
    """Headings give the anchors GitHub gives them: punctuation and code marks dropped."""
    assert _slug("How fast the commands answer, measured") == (
        "how-fast-the-commands-answer-measured"
    )
    assert _slug("Background work: heartbeats, summaries, growth") == (
        "background-work-heartbeats-summaries-growth"
    )
    assert _slug("The `arena` command") == "the-arena-command"
    assert _slug("[Unreleased]") == "unreleased"
