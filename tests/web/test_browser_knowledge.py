"""The knowledge page in a real headless Chromium: a Markdown document uploaded through the
page for a group becomes a source in the table (external, read by the group, its chunks on
click), search finds its passage, and a locator opened from the hit shows the file's lines now,
numbered, as cited; the context inspector's passage links to the same view. Hostile text in the
document is shown as text. A lorebook entry added through the page's form (after a refused
one, its reason shown) is listed with its book, owner, keys and pattern, its hostile text shown
as text, and removed after the Remove button asks once more. An entry's Edit button fills the
form; a refused change shows its reason and leaves the entry, a saved one is listed (and kept
after a reload), and Cancel changes nothing.

A failing test saves its page as a screenshot under ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser import needs_chromium
from tests.web_helpers import console_server, console_settings

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, needs_chromium, pytest.mark.timeout(120)]

GROUP = "kb-browser"
GUIDE = """# Deploy guide

How we ship.

## Rollback

To roll back a release, run `make rollback` with the previous tag.
The pipeline keeps the last five artefacts. <img src=x onerror=alert(1)>
"""


def test_upload_search_and_open_a_locator(tmp_path: Path, embedded_redis_url: str, page: Any):
    expect = playwright.expect
    settings = console_settings(tmp_path, embedded_redis_url)
    with console_server(settings) as base:
        page.goto(f"{base}/knowledge")
        expect(page.locator("#sources tbody tr.empty")).to_contain_text("No knowledge sources")
        page.set_input_files(
            "#upload-files",
            files=[{"name": "deploy.md", "mimeType": "text/markdown", "buffer": GUIDE.encode()}],
        )
        page.select_option("#upload-owner", "group")
        page.fill("#upload-group", GROUP)
        page.click("#upload button[type=submit]")
        source = "uploads-kb-browser"
        expect(page.locator("#knowledge-note")).to_contain_text(f"1 file saved to {source}")
        row = page.locator(f'#sources tr[data-source="{source}"]')
        expect(row).to_contain_text(f"group {GROUP}")
        expect(row).to_contain_text("external")
        expect(row.locator("td.num").first).to_have_text("1")  # files
        expect(page.locator("#chunks-title")).to_contain_text("Chunks of uploads-kb-browser")
        expect(page.locator("#chunk-rows tbody tr", has_text="Rollback")).to_have_count(1)
        assert (settings.data_dir / "knowledge" / "uploads-kb-browser" / "deploy.md").is_file()

        page.fill("#q", "how do we roll back")
        page.fill("#search-group", GROUP)
        page.press("#q", "Enter")
        hit = page.locator("#hits tbody tr").first
        expect(hit).to_contain_text("make rollback")
        expect(hit).to_contain_text("external")
        expect(hit.locator(".why")).to_contain_text("matched roll")  # and why it was found
        hit.locator("a.locator").click()
        expect(page.locator("#located")).to_be_visible()
        expect(page.locator("#located-head")).to_contain_text("current")
        expect(page.locator("#located-note")).to_contain_text("never instructions")
        line = page.locator("#lines tr", has_text="make rollback")
        expect(line.locator("td.n")).to_have_text("7")
        expect(page.locator("#lines")).to_contain_text("<img src=x onerror=alert(1)>")
        assert page.locator("main img").count() == 0
        assert "/knowledge?locator=uploads-kb-browser%2Fdeploy.md" in page.url

        page.reload()  # the locator in the address opens again
        reopened = page.locator("#lines tr", has_text="make rollback")
        expect(reopened.locator("td.n")).to_have_text("7")
        page.fill("#locator", "uploads-kb-browser/nothing.md#L1")
        page.press("#locator", "Enter")
        expect(page.locator("#locate-error")).to_contain_text("nothing.md")

        page.goto(f"{base}/context?agent=ping&group={GROUP}&message=how+do+we+roll+back")
        passage = page.locator("#recall a.locator").first
        expect(passage).to_contain_text("uploads-kb-browser/deploy.md#L")
        passage.click()
        expect(page.locator("#lines")).to_contain_text("make rollback")


def test_a_lore_entry_is_added_listed_and_removed(
    tmp_path: Path, embedded_redis_url: str, page: Any
):
    expect = playwright.expect
    settings = console_settings(tmp_path, embedded_redis_url)
    with console_server(settings) as base:
        page.goto(f"{base}/knowledge")
        expect(page.locator("#lore-entries tbody tr.empty")).to_contain_text("No lore entries")
        page.select_option("#lore-owner", "group")
        page.fill("#lore-group", GROUP)
        page.fill("#lore-text", "x")
        page.fill("#lore-keys", "")
        page.click("#lore-form button[type=submit]")
        expect(page.locator("#lore-error")).to_contain_text("give at least one key or a pattern")

        hostile = "Rollbacks need two approvals. <img src=x onerror=alert(1)>"
        page.fill("#lore-text", hostile)
        page.fill("#lore-keys", "rollback, roll back")
        page.fill("#lore-pattern", r"revert\w*")
        page.fill("#lore-priority", "70")
        page.click("#lore-form button[type=submit]")
        expect(page.locator("#knowledge-note")).to_contain_text("to lore-kb-browser")
        expect(page.locator("#lore-error")).to_be_hidden()
        row = page.locator("#lore-entries tbody tr[data-lore]")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("lore-kb-browser")
        expect(row).to_contain_text(f"group {GROUP}")
        expect(row).to_contain_text(r"rollback, roll back /revert\w*/")
        expect(row).to_contain_text("70")
        expect(row.locator("td.text")).to_have_text(hostile)
        assert page.locator("main img").count() == 0
        expect(page.locator('#sources tr[data-source="lore-kb-browser"]')).to_contain_text("lore")

        remove = row.locator("button", has_text="Remove")
        remove.click()
        expect(remove).to_contain_text("Remove entry")  # asks once more
        expect(row).to_have_count(1)
        remove.click()
        expect(page.locator("#lore-entries tbody tr[data-lore]")).to_have_count(0)
        expect(page.locator("#knowledge-note")).to_contain_text("removed lore entry")


def test_a_lore_entry_is_edited_in_place(tmp_path: Path, embedded_redis_url: str, page: Any):
    expect = playwright.expect
    settings = console_settings(tmp_path, embedded_redis_url)
    with console_server(settings) as base:
        page.goto(f"{base}/knowledge")
        page.select_option("#lore-owner", "group")
        page.fill("#lore-group", GROUP)
        page.fill("#lore-text", "Deploys happen on Tuesdays.")
        page.fill("#lore-keys", "deploy")
        page.fill("#lore-priority", "60")
        page.click("#lore-form button[type=submit]")
        row = page.locator("#lore-entries tbody tr[data-lore]")
        expect(row.locator("td.text")).to_have_text("Deploys happen on Tuesdays.")

        row.locator("button", has_text="Edit").click()
        expect(page.locator("#lore-form-title")).to_contain_text("Edit entry")
        expect(page.locator("#lore-form-title")).to_contain_text("lore-kb-browser")
        expect(page.locator("#lore-text")).to_have_value("Deploys happen on Tuesdays.")
        expect(page.locator("#lore-keys")).to_have_value("deploy")
        expect(page.locator("#lore-priority")).to_have_value("60")
        expect(page.locator("#lore-owner")).to_be_hidden()  # an entry stays in its book
        expect(page.locator("#lore-submit")).to_have_text("Save")

        page.fill("#lore-pattern", "(a+)+")
        page.click("#lore-submit")
        expect(page.locator("#lore-error")).to_contain_text("a repeated group that itself repeats")
        expect(row.locator("td.text")).to_have_text("Deploys happen on Tuesdays.")

        edited = "Deploys happen on Wednesdays, after the review. <b>bold</b>"
        page.fill("#lore-pattern", "")
        page.fill("#lore-text", edited)
        page.fill("#lore-keys", "deploy, ship")
        page.click("#lore-submit")
        expect(page.locator("#knowledge-note")).to_contain_text("Edited lore entry")
        expect(page.locator("#lore-error")).to_be_hidden()
        expect(row).to_have_count(1)
        expect(row.locator("td.text")).to_have_text(edited)
        expect(row).to_contain_text("deploy, ship")
        assert page.locator("#lore-entries b").count() == 0
        expect(page.locator("#lore-form-title")).to_have_text("Add an entry")
        expect(page.locator("#lore-submit")).to_have_text("Add")
        expect(page.locator("#lore-owner")).to_be_visible()
        expect(page.locator("#lore-text")).to_have_value("")

        page.reload()  # the edit was saved, not only shown
        saved = page.locator("#lore-entries tbody tr[data-lore] td.text")
        expect(saved).to_have_text(edited)
        page.locator("#lore-entries button", has_text="Edit").click()
        page.fill("#lore-text", "Never saved.")
        page.click("#lore-cancel")
        expect(page.locator("#lore-form-title")).to_have_text("Add an entry")
        expect(saved).to_have_text(edited)
