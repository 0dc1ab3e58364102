"""Where the parts are wired: from ``Settings`` (and a database) to the team, the working
values and every store, each built once.

The daemon, the console, ``arena context`` and the CLI's checks all take their
collaborators from a :class:`Wiring`; nothing else turns settings into stores. A part is built
the first time it is asked for, so a command that previews one turn builds only what that
turn reads.
"""

from __future__ import annotations

from functools import cached_property

from sqlalchemy.engine import Engine

from orchestrator.core.context.tokens import DriftCorrector, TokenCounter
from orchestrator.core.context.transcript import Transcript
from orchestrator.core.prompts import Prompts
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.corrections import Corrections
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.recall.recaller import Recaller
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.tools import MemoryTools
from orchestrator.memory.writer import MemoryWriter
from orchestrator.runtime.briefing import Briefing, RecentSource, load_drift
from orchestrator.runtime.team import Team, load_team
from orchestrator.runtime.tuning import Tuning
from orchestrator.settings import Settings

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
        self.tuning = Tuning(settings)
        if team is not None:
            self.team = team

    def reloaded(self) -> Wiring:
        """A wiring on the same database with the team read from disk again (its identity
        files may have been edited since)."""
        return Wiring(self.settings, self._engine)

    @cached_property
    def team(self) -> Team:
        """The agents, their identity files and their router.

        Raises:
            AgentDefinitionError: naming the first bad agent file and field.
        """
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
        return Prompts(self.settings.prompts_dir)

    @cached_property
    def counter(self) -> TokenCounter:
        """The token counter every estimate uses."""
        return TokenCounter()

    @cached_property
    def transcript(self) -> Transcript:
        """The conversation as agents see it, its labels remembered across turns."""
        return Transcript(self.counter, self.settings.tz)

    def drift(self) -> DriftCorrector:
        """The token correction factors learnt by earlier runs (read from disk each time)."""
        return load_drift(self.settings)

    @cached_property
    def session(self) -> SessionMemory:
        """The group session memories."""
        return SessionMemory(self.engine)

    @cached_property
    def history(self) -> HistoryStore:
        """Every group's messages."""
        return HistoryStore(self.engine)

    @cached_property
    def personal(self) -> PersonalLog:
        """The agents' daily logs."""
        return PersonalLog(self.settings.workspaces_dir, self.settings.zone)

    @cached_property
    def recaller(self) -> Recaller:
        """Recall over session memories and the whole history."""
        return Recaller(self.session, history=HistoryIndex(self.engine))

    @cached_property
    def writer(self) -> MemoryWriter:
        """The memory write path: the gate, session memory and the daily logs."""
        return MemoryWriter(self.session, self.personal, self.tuning.gate, self.settings.zone)

    @cached_property
    def corrections(self) -> Corrections:
        """People's corrections of session memories, through the same gate."""
        return Corrections(self.engine, gate=self.tuning.gate)

    @cached_property
    def tools(self) -> MemoryTools:
        """The memory tools agents call."""
        return MemoryTools(
            engine=self.engine,
            session=self.session,
            recaller=self.recaller,
            writer=self.writer,
            corrections=self.corrections,
            history=self.history,
        )

    def briefing(self, recent: RecentSource | None = None) -> Briefing:
        """What gathers each agent's layers; a group's recent messages from ``recent`` (the
        daemon's cache), else read from the database each time."""
        return Briefing(
            tuning=self.tuning,
            team=self.team,
            data_dir=self.settings.data_dir,
            store=recent or self.history,
            personal=self.personal,
            recaller=self.recaller,
            counter=self.counter,
        )
