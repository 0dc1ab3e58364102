"""The console's knowledge API against a real uvicorn server and a real SQLite file: documents
uploaded for a group are saved under the data folder, indexed at once and found by search as
the group's turns would find them (not by another group's); a locator gives the file's lines
now, numbered, marked changed once the file changes; a second upload replaces the file and
says so; a source is forgotten with its files kept. Bad names, paths, suffixes, sizes, owners,
unknown sources and malformed locators are refused with a one-line reason, nothing saved."""

from __future__ import annotations

import sys
import uuid

import httpx
import pytest

from orchestrator.memory.knowledge.indexer import MAX_FILE_BYTES
from orchestrator.web.knowledge_uploads import MAX_UPLOAD_BODY_BYTES, Refused, checked_file
from tests.documents import docx_bytes, pdf_bytes
from tests.web_helpers import Served

GUIDE = """# Deploy guide

How we ship.

## Rollback

To roll back a release, run `make rollback` with the previous tag.
The pipeline keeps the last five artefacts.
"""


@pytest.fixture
def group() -> str:
    return f"kb-{uuid.uuid4().hex[:10]}"


def _upload(api: httpx.Client, files: list[tuple[str, bytes]], **form: str) -> httpx.Response:
    parts = [("files", (name, data, "text/markdown")) for name, data in files]
    return api.post("/api/knowledge/uploads", files=parts, data=form)


def _raw_upload(api: httpx.Client, file_name: str, group: str) -> httpx.Response:
    """A one-file upload whose file name is sent byte for byte (httpx would escape it)."""
    boundary = "arena-test-boundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="group"\r\n\r\n{group}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
        f'filename="{file_name}"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--{boundary}--\r\n'
    ).encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return api.post("/api/knowledge/uploads", content=body, headers=headers)


def test_an_upload_is_saved_indexed_and_searchable(api: httpx.Client, served: Served, group: str):
    response = _upload(api, [("guide.md", GUIDE.encode())], group=group)
    assert response.status_code == 201, response.text
    body = response.json()
    name = f"uploads-{group}"
    assert body["created"] is True
    assert body["source"]["name"] == name
    assert body["source"]["kind"] == "upload"
    assert body["source"]["trust"] == "external"
    assert body["source"]["owner"] == f"group {group}"
    size = len(GUIDE.encode())
    saved_as = {"name": "guide.md", "bytes": size, "replaced": False, "path": f"{name}/guide.md"}
    assert body["files"] == [saved_as]
    assert body["sync"]["added"] == 1
    assert body["sync"]["chunks_written"] >= 1
    saved = served.settings.data_dir / "knowledge" / name / "guide.md"
    assert saved.read_text() == GUIDE

    listed = api.get("/api/knowledge/sources").json()["sources"]
    row = next(s for s in listed if s["name"] == name)
    assert row["files"] == 1
    assert row["chunks"] >= 1
    assert row["checked_at"] is not None
    assert row["problem"] is None

    found = api.get("/api/knowledge/search", params={"q": "how to roll back", "group": group})
    assert found.status_code == 200
    hits = found.json()["hits"]
    assert hits
    assert hits[0]["source"] == name
    assert "make rollback" in hits[0]["text"]
    assert hits[0]["trust"] == "external"
    other = api.get("/api/knowledge/search", params={"q": "roll back", "group": "elsewhere"})
    assert [h for h in other.json()["hits"] if h["source"] == name] == []

    chunks = api.get(f"/api/knowledge/sources/{name}/chunks", params={"path": "guide.md"})
    assert chunks.status_code == 200
    rows = chunks.json()["chunks"]
    assert rows
    assert all(r["path"] == f"{name}/guide.md" for r in rows)
    assert any("Rollback" in r["heading"] for r in rows)


def test_a_locator_gives_the_lines_now(api: httpx.Client, served: Served, group: str):
    name = f"uploads-{group}"
    _upload(api, [("guide.md", GUIDE.encode())], group=group).raise_for_status()
    hit = api.get("/api/knowledge/search", params={"q": "rollback", "group": group}).json()
    locator = hit["hits"][0]["locator"]
    shown = api.get("/api/knowledge/locate", params={"locator": locator})
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body["state"] == "current"
    assert body["trust"] == "external"
    assert body["source"] == name
    numbered = {line["n"]: line["text"] for line in body["lines"]}
    assert numbered[7] == "To roll back a release, run `make rollback` with the previous tag."

    changed = GUIDE.replace("make rollback", "make revert")
    again = _upload(api, [("guide.md", changed.encode())], group=group)
    assert again.status_code == 201
    assert again.json()["files"][0]["replaced"] is True
    assert "replaced: guide.md" in again.json()["note"]
    assert again.json()["created"] is False
    after = api.get("/api/knowledge/locate", params={"locator": locator}).json()
    assert after["state"] == "changed"
    assert "make revert" in "\n".join(line["text"] for line in after["lines"])
    # The replaced upload is kept, never indexed (its old text is no longer found).
    kept = list((served.settings.data_dir / "knowledge" / name / ".versions").iterdir())
    assert [p.name.split(".md.")[0] for p in kept] == ["guide"]
    assert kept[0].read_text(encoding="utf-8") == GUIDE
    hits = api.get("/api/knowledge/search", params={"q": "make rollback", "group": group}).json()
    assert all("make rollback" not in h["text"] for h in hits["hits"])


def test_bad_uploads_are_refused_and_nothing_is_saved(
    api: httpx.Client, served: Served, group: str
) -> None:
    cases = [
        ("../evil.md", 422, "'..'"),
        ("a/b.md", 422, "'/'"),
        ("a\\b.md", 422, "'\\'"),
        (".hidden.md", 422, "hidden"),
        ("picture.png", 422, "not a text file"),
        ("", 422, ""),
    ]
    for name, status, words in cases:
        response = _upload(api, [("ok.md", b"fine\n"), (name, b"# hi\n")], group=group)
        assert response.status_code == status, (name, response.text)
        assert words in response.json()["error"], (name, response.json())
    raw = _raw_upload(api, "tab\tname\x01.md", group)  # as sent, not percent-encoded
    assert raw.status_code == 422, raw.text
    assert "control character" in raw.json()["error"]
    big = _upload(api, [("big.md", b"x" * (MAX_FILE_BYTES + 1))], group=group)
    assert big.status_code == 413
    assert "big.md" in big.json()["error"]
    assert "bytes" in big.json()["error"]
    binary = _upload(api, [("data.txt", b"\xff\xfe\x00x")], group=group)
    assert binary.status_code == 422
    assert "not text" in binary.json()["error"]
    assert not (served.settings.data_dir / "knowledge" / f"uploads-{group}").exists()
    assert all(
        s["name"] != f"uploads-{group}" for s in api.get("/api/knowledge/sources").json()["sources"]
    )


def test_a_pdf_and_a_docx_are_uploaded_and_a_pdf_passage_is_shown_by_its_page(
    api: httpx.Client, served: Served, group: str
):
    name = f"uploads-{group}"
    report = pdf_bytes([["Summary"], ["Rollback", "", "Run make rollback with the last tag."]])
    guide = docx_bytes([("Heading1", "Deploys"), ("", "Deploys happen on Tuesdays.")])
    response = _upload(api, [("report.pdf", report), ("guide.docx", guide)], group=group)
    assert response.status_code == 201, response.text
    assert response.json()["sync"]["added"] == 2
    assert response.json()["sync"]["problems"] == []
    saved = served.settings.data_dir / "knowledge" / name / "report.pdf"
    assert saved.read_bytes() == report
    hits = api.get("/api/knowledge/search", params={"q": "rollback tag", "group": group}).json()
    locator = hits["hits"][0]["locator"]
    assert locator.startswith(f"{name}/report.pdf#p2:L1-3@")
    shown = api.get("/api/knowledge/locate", params={"locator": locator}).json()
    assert (shown["state"], shown["page"]) == ("current", 2)
    assert shown["lines"][2] == {"n": 3, "text": "Run make rollback with the last tag."}
    again = _upload(api, [("report.pdf", pdf_bytes([["Nothing left."]]))], group=group)
    assert again.json()["files"][0]["replaced"] is True
    (kept,) = (served.settings.data_dir / "knowledge" / name / ".versions").iterdir()
    assert kept.read_bytes() == report, "the replaced PDF is kept byte for byte"
    fake = _upload(api, [("fake.pdf", b"just text\n")], group=group)
    assert fake.status_code == 422
    assert "not a PDF" in fake.json()["error"]


def test_a_document_upload_needs_the_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "mammoth", None)
    with pytest.raises(Refused, match=r"DOCX needs the \[documents\] extra") as refused:
        checked_file("guide.docx", docx_bytes([("", "text")]))
    assert refused.value.status == 422


def test_an_upload_over_the_route_limit_is_refused_before_it_is_read(api: httpx.Client, group: str):
    data = b"y" * (MAX_UPLOAD_BODY_BYTES + 1)
    response = _upload(api, [("huge.md", data)], group=group)
    assert response.status_code == 413
    assert response.json()["error"].startswith("upload: ")


def test_who_reads_an_upload_must_be_said_once(api: httpx.Client, group: str):
    for form in ({}, {"group": group, "everyone": "true"}, {"agent": "nobody"}):
        response = _upload(api, [("a.md", b"# a\n")], **form)
        assert response.status_code == 422, (form, response.text)
        assert response.json()["error"]
    bad_source = _upload(api, [("a.md", b"# a\n")], group=group, source="Bad Name")
    assert bad_source.status_code == 422
    assert "source" in bad_source.json()["error"]
    bad_trust = _upload(api, [("a.md", b"# a\n")], group=group, trust="maybe")
    assert bad_trust.status_code == 422
    assert "trust" in bad_trust.json()["error"]


def test_an_upload_source_keeps_its_owner_and_trust(api: httpx.Client, group: str):
    name = f"kb-{uuid.uuid4().hex[:8]}"
    made = _upload(api, [("a.md", b"# a\n")], agent="ping", source=name, trust="trusted")
    assert made.status_code == 201, made.text
    assert made.json()["source"]["owner"] == "agent ping"
    assert made.json()["source"]["trust"] == "trusted"
    other = _upload(api, [("b.md", b"# b\n")], group=group, source=name)
    assert other.status_code == 409
    assert "read by agent ping" in other.json()["error"]
    distrusted = _upload(api, [("b.md", b"# b\n")], agent="ping", source=name, trust="external")
    assert distrusted.status_code == 409
    assert "trusted" in distrusted.json()["error"]


def test_a_source_is_forgotten_and_its_files_kept(api: httpx.Client, served: Served, group: str):
    name = f"uploads-{group}"
    _upload(api, [("guide.md", GUIDE.encode())], group=group).raise_for_status()
    gone = api.delete(f"/api/knowledge/sources/{name}")
    assert gone.status_code == 200
    assert "kept" in gone.json()["note"]
    assert (served.settings.data_dir / "knowledge" / name / "guide.md").is_file()
    assert api.delete(f"/api/knowledge/sources/{name}").status_code == 404
    assert api.get(f"/api/knowledge/sources/{name}/chunks").status_code == 404


def test_unknown_sources_and_bad_locators_are_4xx(api: httpx.Client):
    missing = api.get("/api/knowledge/sources/no-such-source/chunks")
    assert missing.status_code == 404
    assert "no-such-source" in missing.json()["error"]
    for locator, status in (
        ("nothing-here", 422),
        ("../etc/passwd#L1", 422),
        ("docs/a.md#L0", 422),
        ("docs/a.md#L1@zz", 422),
        ("no-such-source/a.md#L1-2", 404),
    ):
        response = api.get("/api/knowledge/locate", params={"locator": locator})
        assert response.status_code == status, (locator, response.text)
        assert response.json()["error"]
    assert api.get("/api/knowledge/search", params={"q": ""}).status_code == 422
    bad_group = api.get("/api/knowledge/search", params={"q": "x", "group": "../x"})
    assert bad_group.status_code == 422
