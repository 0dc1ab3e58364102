"""What the console's API of knowledge sources answers, as models: the sources (who reads
them, their counts and their last check), a source's chunks, a locator resolved to the lines
it names now, a search as a turn's recall would make it, an upload and a removal, and the
lorebooks' entries (one to add, as asked). Times are ISO 8601.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.web.schemas import Answer, optional_key

__all__ = [
    "ChunkRow",
    "KnowledgeChunks",
    "KnowledgeHitOut",
    "KnowledgeSearch",
    "KnowledgeSources",
    "Located",
    "LocatedLine",
    "LoreEntries",
    "LoreEntryEdit",
    "LoreEntryOut",
    "LoreRemoved",
    "NewLoreEntry",
    "SourceOut",
    "SourceRemoved",
    "SyncOut",
    "Uploaded",
    "UploadedFile",
]


class SourceOut(Answer):
    """A knowledge source: what it indexes, who reads it, how far it is trusted, and how its
    last check went."""

    name: str
    kind: str = Field(description="folder, file, project or upload.")
    root: str = Field(description="The folder or file it indexes.")
    scope: str = Field(description="group, agent or everyone.")
    scope_id: str = Field(description="The group or agent (empty for everyone).")
    owner: str = Field(description="Who reads it, as people write it: `group demo`, `everyone`.")
    trust: str = Field(description="trusted, or external (material, never instructions).")
    files: int
    chunks: int
    embedded: int | None = Field(
        default=None,
        description="How many of its chunks are found by meaning too (null: embeddings off).",
    )
    created_at: str
    checked_at: str | None = Field(description="When its files were last checked.")
    problem: str | None = Field(description="Why its last check could not read them, if so.")


class KnowledgeSources(Answer):
    """Every source, by name."""

    sources: list[SourceOut]


class ChunkRow(Answer):
    """One chunk of a source: where it is, what it sits under, its size and its first lines."""

    id: int
    locator: str = Field(description="`source/path#L12-40@digest`.")
    path: str = Field(description="The file, as locators name it (`source/path`).")
    start: int
    end: int
    heading: str = Field(description="The headings or definitions it sits under (`A > B`).")
    kind: str = Field(description="section, paragraph, definition or lines.")
    tokens: int
    preview: str = Field(description="Its first lines.")


class KnowledgeChunks(Answer):
    """A source's chunks in file and line order (of one file when asked), up to ``limit``."""

    source: str
    path: str | None
    chunks: list[ChunkRow]
    more: bool = Field(description="Whether there are more than were sent.")


class LocatedLine(Answer):
    """A line of a file, numbered as an editor numbers it."""

    n: int
    text: str


class Located(Answer):
    """What a locator names now."""

    asked: str = Field(description="The locator as asked.")
    locator: str = Field(description="Where the text is now (with the digest of the lines now).")
    source: str
    path: str = Field(description="The file, as locators name it (`source/path`).")
    state: str = Field(
        description="current (as cited), moved (the cited text is at other lines now), changed "
        "(these lines differ from what was cited) or unversioned (no digest was given)."
    )
    trust: str
    page: int | None = optional_key("A PDF's page, whose lines these are.")
    start: int
    end: int
    lines: list[LocatedLine]


class KnowledgeHitOut(Answer):
    """A chunk a search found: where it is, its text and trust, its full-text score."""

    rank: int
    locator: str
    source: str
    path: str
    start: int
    end: int
    heading: str
    trust: str
    tokens: int
    score: float = Field(description="Higher is better; comparable within one search only.")
    why: str = Field(default="", description="The query's words it holds, its meaning's closeness.")
    text: str


class KnowledgeSearch(Answer):
    """The chunks the query finds among the sources a turn would see, best first."""

    query: str
    terms: list[str] = Field(description="The content words searched for.")
    scopes: list[str] = Field(description="Whose sources were searched (`group demo`, …).")
    hits: list[KnowledgeHitOut]


class SyncOut(Answer):
    """What indexing a source changed."""

    files: int
    added: int
    changed: int
    removed: int
    unchanged: int
    chunks_written: int
    chunks_removed: int
    seconds: float
    problems: list[str] = Field(description="Files it could not index, and why.")


class UploadedFile(Answer):
    """A file saved by an upload."""

    name: str
    bytes: int
    replaced: bool = Field(description="Whether it replaced an earlier upload of that name.")
    path: str = Field(description="The file, as locators name it (`source/name`).")


class Uploaded(Answer):
    """The source the files were saved to (created by the first upload), the files, and what
    indexing them changed."""

    source: SourceOut
    created: bool = Field(description="Whether this upload created the source.")
    files: list[UploadedFile]
    sync: SyncOut
    note: str = Field(description="What happened, in one line.")


class SourceRemoved(Answer):
    """A source forgotten: its chunks are gone, its files are kept."""

    name: str
    root: str = Field(description="Where its files are, untouched.")
    note: str


class NewLoreEntry(BaseModel):
    """A lorebook entry to add: its text, the keys and/or pattern that bring it in, its
    priority, whose turns are given it (exactly one of group, agent, everyone) and its book
    (default ``lore-<group>``, ``lore-<agent>`` or ``lore``, made on first use)."""

    text: str = Field(description="The fact given to the agent, 1 to 2000 characters.")
    keys: list[str] = Field(default=[], description="Words or phrases that bring it in.")
    pattern: str | None = Field(
        default=None, description="A regular expression that brings it in (case-insensitive)."
    )
    priority: int = Field(default=50, description="0..100; higher is given first.")
    group: str | None = Field(default=None, max_length=200)
    agent: str | None = Field(default=None, max_length=64)
    everyone: bool = False
    book: str | None = Field(default=None, max_length=200, description="The lorebook.")


class LoreEntryEdit(BaseModel):
    """What to change in a lorebook entry: a field left out stays as it was. ``keys: []`` (or
    null) drops the keys and ``pattern: ""`` (or null) the pattern; the entry keeps at least
    one of the two, and stays in its book."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(default=None, description="The new text, 1 to 2000 characters.")
    keys: list[str] | None = Field(default=None, description="The new keys, all of them.")
    pattern: str | None = Field(default=None, description="The new regular expression.")
    priority: int | None = Field(default=None, description="The new priority, 0..100.")


class LoreEntryOut(Answer):
    """A lorebook entry: its book and who reads it, what brings it in, its priority and cost."""

    id: int
    book: str
    owner: str = Field(description="Whose turns are given it: `group demo`, `everyone`.")
    keys: list[str]
    pattern: str | None = Field(description="The regular expression that brings it in, if any.")
    priority: int
    tokens: int
    text: str


class LoreEntries(Answer):
    """Every lorebook entry, by book and id."""

    entries: list[LoreEntryOut]


class LoreRemoved(Answer):
    """A lorebook entry removed."""

    id: int
    note: str
