"""Where the parts are wired: from ``Settings`` (and a database) to the team, the working
values and every store, each built once.

The daemon, the console, ``arena context``, ``arena check`` and the commands that read the
stores take their collaborators from a :class:`Wiring`; nothing else there turns settings into
stores. A part is built, and its module imported, the first time it is asked for: a command
that lists memories loads neither the team nor the prompt templates. (The background jobs run
in workers of their own, below this layer, and open the few stores each needs.)
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from orchestrator.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.engine import Engine

    from orchestrator.core.context.tokens import DriftCorrector, TokenCounter
    from orchestrator.core.context.transcript import Transcript
    from orchestrator.core.prompts import Prompts
    from orchestrator.files import TextFiles
    from orchestrator.memory.approvals import ApprovalStore
    from orchestrator.memory.conversation.store import HistoryStore
    from orchestrator.memory.corrections import Corrections
    from orchestrator.memory.knowledge.indexer import Indexer
    from orchestrator.memory.knowledge.lore import LoreShelf, LoreStore
    from orchestrator.memory.knowledge.store import KnowledgeHit, KnowledgeStore
    from orchestrator.memory.knowledge.vectors import ChunkVectors
    from orchestrator.memory.personal import PersonalLog
    from orchestrator.memory.recall.recaller import Recaller
    from orchestrator.memory.runs import RunStore
    from orchestrator.memory.session.store import SessionMemory
    from orchestrator.memory.tools import MemoryTools
    from orchestrator.memory.versions.store import VersionStore
    from orchestrator.memory.writer import MemoryWriter
    from orchestrator.runtime.briefing import Briefing, RecentSource
    from orchestrator.runtime.team import Team
    from orchestrator.runtime.tuning import Tuning

# Each part imports its module when it is first built (see the module's docstring).

__all__ = ["Wiring"]


class Wiring:
    """The team, the working values and the stores of one arena, each built once.

    Args:
        settings: the arena's settings.
        engine: its database, opened (and disposed of) by the caller; the stores need it.
        team: the team, when the caller loaded it already (else loaded on first use).
    """

    def __init__(
        self, settings: Settings, engine: Engine | None = None, *, team: Team | None = None
    ) -> None:
        self.settings = settings
        self._engine = engine
        if team is not None:
            self.team = team

    def reloaded(self) -> Wiring:
        """A wiring on the same database with the team read from disk again (its identity
        files may have been edited since)."""
        return Wiring(self.settings, self._engine)

    @cached_property
    def tuning(self) -> Tuning:
        """The working values of the settings (per agent where its YAML overrides them)."""
        from orchestrator.runtime.tuning import Tuning

        return Tuning(self.settings)

    @cached_property
    def versions(self) -> VersionStore:
        """The versions of every agent's ``MEMORY.md`` and every group's summary."""
        from orchestrator.memory.versions.store import VersionStore

        return VersionStore(self.engine)

    @cached_property
    def team(self) -> Team:
        """The agents, their identity files and their router.

        Raises:
            AgentDefinitionError: naming the first bad agent file and field.
        """
        from orchestrator.runtime.team import load_team

        return load_team(self.settings)

    @property
    def engine(self) -> Engine:
        """The database the stores use.

        Raises:
            RuntimeError: when this wiring was made without one.
        """
        if self._engine is None:
            raise RuntimeError("this wiring has no database")
        return self._engine

    @cached_property
    def prompts(self) -> Prompts:
        """The prompt templates."""
        from orchestrator.core.prompts import Prompts

        return Prompts(self.settings.prompts_dir)

    @cached_property
    def files(self) -> TextFiles:
        """The small files every turn reads (logs, ``MEMORY.md``, summaries), read again only
        when they change."""
        from orchestrator.files import TextFiles

        return TextFiles()

    @cached_property
    def counter(self) -> TokenCounter:
        """The token counter every estimate uses."""
        from orchestrator.core.context.tokens import TokenCounter

        return TokenCounter()

    @cached_property
    def transcript(self) -> Transcript:
        """The conversation as agents see it, its labels remembered across turns."""
        from orchestrator.core.context.transcript import Transcript

        return Transcript(self.counter, self.settings.tz)

    def drift(self) -> DriftCorrector:
        """The token correction factors learnt by earlier runs (read from disk each time)."""
        from orchestrator.runtime.briefing import load_drift

        return load_drift(self.settings)

    @cached_property
    def session(self) -> SessionMemory:
        """The group session memories."""
        from orchestrator.memory.session.store import SessionMemory

        return SessionMemory(self.engine)

    @cached_property
    def history(self) -> HistoryStore:
        """Every group's messages."""
        from orchestrator.memory.conversation.store import HistoryStore

        return HistoryStore(self.engine)

    @cached_property
    def runs(self) -> RunStore:
        """The Claude Code runs and their steps."""
        from orchestrator.memory.runs import RunStore

        return RunStore(self.engine)

    @cached_property
    def approvals(self) -> ApprovalStore:
        """The runs' requests for approval and the agents' allow-lists."""
        from orchestrator.memory.approvals import ApprovalStore

        return ApprovalStore(self.engine)

    @cached_property
    def personal(self) -> PersonalLog:
        """The agents' daily logs."""
        from orchestrator.memory.personal import PersonalLog

        return PersonalLog(self.settings.workspaces_dir, self.settings.zone, reader=self.files.read)

    @cached_property
    def recaller(self) -> Recaller:
        """Recall over session memories and the whole history."""
        from orchestrator.memory.conversation.index import HistoryIndex
        from orchestrator.memory.recall.recaller import Recaller

        return Recaller(
            self.session,
            history=HistoryIndex(self.engine),
            knowledge=self.knowledge,
            knowledge_vectors=self.knowledge_vectors,
        )

    @cached_property
    def knowledge(self) -> KnowledgeStore:
        """The knowledge sources and their chunks."""
        from orchestrator.memory.knowledge.store import KnowledgeStore

        return KnowledgeStore(self.engine)

    @cached_property
    def lore(self) -> LoreStore:
        """The lorebooks' entries."""
        from orchestrator.memory.knowledge.lore import LoreStore

        return LoreStore(self.knowledge, self.counter)

    @cached_property
    def lore_shelf(self) -> LoreShelf:
        """The lorebooks' entries as turns read them, held in memory a few seconds."""
        from orchestrator.memory.knowledge.lore import LoreShelf

        return LoreShelf(self.lore)

    @cached_property
    def knowledge_vectors(self) -> ChunkVectors | None:
        """Knowledge by meaning: when the model's weights are installed and
        ``ARENA_KNOWLEDGE_EMBEDDINGS`` is not ``off`` (the model loads when first needed)."""
        from orchestrator.memory.knowledge.vectors import ChunkVectors, embeddings_installed

        if self.settings.knowledge_embeddings == "off" or not embeddings_installed():
            return None
        return ChunkVectors(self.engine)

    @cached_property
    def indexer(self) -> Indexer:
        """What indexes the knowledge sources' files."""
        from orchestrator.memory.knowledge.indexer import Indexer

        return Indexer(self.knowledge, self.counter)

    @cached_property
    def writer(self) -> MemoryWriter:
        """The memory write path: the gate, session memory and the daily logs."""
        from orchestrator.memory.writer import MemoryWriter

        return MemoryWriter(self.session, self.personal, self.tuning.gate, self.settings.zone)

    @cached_property
    def corrections(self) -> Corrections:
        """People's corrections of session memories, through the same gate."""
        from orchestrator.memory.corrections import Corrections

        return Corrections(self.engine, gate=self.tuning.gate)

    @cached_property
    def tools(self) -> MemoryTools:
        """The memory tools agents call."""
        from orchestrator.memory.knowledge.tools import KnowledgeTools
        from orchestrator.memory.tools import MemoryTools

        return MemoryTools(
            engine=self.engine,
            session=self.session,
            recaller=self.recaller,
            writer=self.writer,
            corrections=self.corrections,
            history=self.history,
            knowledge=KnowledgeTools(self.knowledge, self.knowledge_search),
        )

    def knowledge_search(
        self, query: str, scopes: Sequence[tuple[str, str]], limit: int
    ) -> list[tuple[KnowledgeHit, str]]:
        """Knowledge searched as a turn ranks it (by meaning too when embeddings are on), for
        people and tools: the chunks best first, with why each was found."""
        from orchestrator.memory.recall.passages import search_knowledge

        return search_knowledge(self.knowledge, query, scopes, limit, self.knowledge_vectors)

    def briefing(self, recent: RecentSource | None = None) -> Briefing:
        """What gathers each agent's layers; a group's recent messages from ``recent`` (the
        daemon's cache), else read from the database each time."""
        from orchestrator.runtime.briefing import Briefing

        return Briefing(
            tuning=self.tuning,
            team=self.team,
            data_dir=self.settings.data_dir,
            store=recent or self.history,
            personal=self.personal,
            recaller=self.recaller,
            counter=self.counter,
            files=self.files,
            lore=self.lore_shelf,
            on_loop=self.engine.dialect.name == "sqlite",
        )
