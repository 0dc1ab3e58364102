"""Documents uploaded from the console, kept as a knowledge source of kind ``upload``: each file
checked (its name, its suffix, its size, UTF-8 text; a PDF or DOCX: what it starts with, and the
``[documents]`` extra that reads it) before any is written, then saved under
``<data_dir>/knowledge/<source>/<name>`` (atomically: a reader sees the old file or the new
one), the source created on the first upload and indexed at once.

A second upload of a name replaces the file (the answer says so), the one it replaces kept in
the folder's ``.versions/`` (never indexed) under its name and the time; the source's chunks of
it are replaced when it is indexed. Removing the source forgets its chunks and keeps the files.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.errors import ValidationError
from orchestrator.files import write_atomic
from orchestrator.memory.knowledge.documents import MAX_DOCUMENT_BYTES, is_document, missing_extra
from orchestrator.memory.knowledge.indexer import MAX_FILE_BYTES, SyncReport
from orchestrator.memory.knowledge.store import Source, validate_source_name
from orchestrator.memory.knowledge.walk import readable_suffix
from orchestrator.runtime.wiring import Wiring

__all__ = [
    "MAX_FILES",
    "MAX_NAME_CHARS",
    "MAX_UPLOAD_BODY_BYTES",
    "VERSIONS",
    "Refused",
    "Saved",
    "Upload",
    "checked_file",
    "default_source_name",
    "save_and_index",
    "uploads_folder",
]

MAX_FILES = 20
"""The most files one upload may carry."""
VERSIONS = ".versions"
"""Where, in an upload source's folder, the files an upload replaced are kept."""
MAX_NAME_CHARS = 200
MAX_UPLOAD_BODY_BYTES = max(4 * MAX_FILE_BYTES, MAX_DOCUMENT_BYTES) + 64 * 1024
"""The most one upload's request may send: four text files of the largest size indexed, or one
PDF or DOCX, and the form around them."""
_STARTS = {".pdf": (b"%PDF-", "PDF"), ".docx": (b"PK\x03\x04", "DOCX (a zip archive)")}


class Refused(Exception):
    """An upload refused: its HTTP status and the reason, in one line."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Upload:
    """A checked file: its name and its bytes."""

    name: str
    data: bytes
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Saved:
    """What an upload did: the source (and whether it was created), each file's name, size and
    whether it replaced one, and the indexing's report."""

    source: Source
    created: bool
    files: list[tuple[Upload, bool]]
    report: SyncReport


def uploads_folder(data_dir: Path, source: str) -> Path:
    """Where an upload source's files are kept."""
    return data_dir / "knowledge" / validate_source_name(source)


def default_source_name(scope: str, scope_id: str) -> str:
    """``uploads-<group>``, ``uploads-<agent>`` or ``uploads`` (at most 64 characters)."""
    if scope == "everyone":
        return "uploads"
    return f"uploads-{scope_id}"[:64].rstrip("-_")


def _check_name(name: str) -> str:
    shown = repr(name[:80])
    if not name.strip():
        raise Refused(422, "file name: empty")
    if len(name) > MAX_NAME_CHARS:
        raise Refused(422, f"file name {shown}: longer than {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in name):
        raise Refused(422, f"file name {shown}: contains a control character")
    if "/" in name or "\\" in name or ".." in name:
        raise Refused(422, f"file name {shown}: a bare file name, no '/', '\\' or '..'")
    if name.startswith("."):
        raise Refused(422, f"file name {shown}: a hidden name (starting with '.')")
    if "#" in name or name != name.strip():
        raise Refused(422, f"file name {shown}: no '#', no leading or trailing spaces")
    if not readable_suffix(name):
        raise Refused(
            422,
            f"file name {shown}: not a text file or document the index reads "
            "(e.g. .md, .txt, .py, .pdf)",
        )
    return name


def checked_file(name: str | None, data: bytes) -> Upload:
    """``data`` as an upload called ``name``, if it may be one.

    Raises:
        Refused: a bad name (422), over :data:`MAX_FILE_BYTES` (413; a PDF or DOCX over
            :data:`MAX_DOCUMENT_BYTES`), not UTF-8 text or not the document its suffix says,
            or a document without the extra that reads it (422).
    """
    valid = _check_name(name or "")
    document = is_document(valid)
    limit = MAX_DOCUMENT_BYTES if document else MAX_FILE_BYTES
    if len(data) > limit:
        raise Refused(413, f"file {valid!r}: over {limit:,} bytes, the most a file indexed may be")
    if document:
        _check_document(valid, data)
    elif b"\x00" in data:
        raise Refused(422, f"file {valid!r}: not text (binary)")
    else:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(422, f"file {valid!r}: not UTF-8 text") from None
    return Upload(name=valid, data=data, size=len(data))


def _check_document(name: str, data: bytes) -> None:
    missing = missing_extra(name)
    if missing is not None:
        raise Refused(422, f"file {name!r}: {missing}")
    start, kind = _STARTS[Path(name).suffix.lower()]
    if not data[:1024].lstrip().startswith(start):
        raise Refused(422, f"file {name!r}: not a {kind}")


def _source_for(
    wiring: Wiring, name: str, scope: str, scope_id: str, trust: str | None
) -> tuple[Source, bool]:
    """The upload source ``name``, made if missing; refused when it exists otherwise."""
    store = wiring.knowledge
    found = store.get(name)
    if found is None:
        try:
            made = store.add(
                name=name,
                kind="upload",
                root=uploads_folder(wiring.settings.data_dir, name),
                scope=scope,
                scope_id=scope_id,
                trust=trust or "external",
                now=datetime.now(UTC),
            )
            return made, True
        except ValidationError as exc:
            if "exists already" not in str(exc):
                raise Refused(422, str(exc)) from None
            found = store.get(name)  # made by an upload at the same time
            if found is None:
                reason = f"source {name!r} changed while it was made: try again"
                raise Refused(409, reason) from None
    owner = "everyone" if scope == "everyone" else f"{scope} {scope_id}"
    if found.kind != "upload":
        raise Refused(
            409, f"source {name!r} indexes a {found.kind}, not uploads: choose another name"
        )
    if found.owner != owner:
        raise Refused(409, f"source {name!r} is read by {found.owner}, not {owner}")
    if trust is not None and trust != found.trust:
        raise Refused(
            409, f"source {name!r} is {found.trust}: a source's trust is set when it is made"
        )
    return found, False


def _keep_version(path: Path, kept: Path) -> None:
    """The file an upload replaces, kept under :data:`VERSIONS` (a hidden folder: never
    indexed), so no version a person uploaded is lost."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(kept, path.read_bytes())


def save_and_index(
    wiring: Wiring,
    uploads: list[Upload],
    *,
    source: str,
    scope: str,
    scope_id: str,
    trust: str | None,
) -> Saved:
    """Save ``uploads`` into source ``source`` (made if missing) and index it. Blocking.

    Raises:
        Refused: the source exists as another kind, for others or with another trust (409).
    """
    found, created = _source_for(wiring, source, scope, scope_id, trust)
    folder = Path(found.root)
    files = []
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    for upload in uploads:
        path = folder / upload.name
        replaced = path.exists()
        if replaced:
            _keep_version(path, folder / VERSIONS / f"{upload.name}.{stamp}")
        write_atomic(path, upload.data)
        files.append((upload, replaced))
    report = wiring.indexer.sync(found, now=datetime.now(UTC))
    fresh = wiring.knowledge.get(found.name) or found
    return Saved(source=fresh, created=created, files=files, report=report)
