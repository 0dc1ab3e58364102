"""What the peer benchmark's frameworks share (``tests/bench/peers.py``): our agents as they see
them, the workload, the prior messages of ``--realistic`` and the measuring loop.

A framework gives a factory of teams: one team per group, each able to ``ask`` one message (one
run that stops after one agent reply, the id of the agent that answered), the group's prior
messages given with its first message. The loop warms up on a team of its own, then runs the
groups concurrently, each group's messages in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

# The texts throughput.py stores as a group's history.
from tests.bench.throughput import AGENT_TEXTS, PERSON_TEXTS

__all__ = [
    "REPLY",
    "Calls",
    "Persona",
    "Plan",
    "Prior",
    "Team",
    "TeamFactory",
    "load_personas",
    "measure",
    "mentioned",
    "priors",
    "workload",
]

REPLY = "Noted, I will take it from here."


@dataclass(frozen=True, slots=True, kw_only=True)
class Persona:
    """One of our agents as a peer framework sees it."""

    id: str
    description: str
    system_message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Prior:
    """A message a group held before the run: a person's (``agent`` False) or an agent's."""

    sender: str
    text: str
    agent: bool


@dataclass(slots=True)
class Calls:
    """What the zero-latency clients of one measurement were asked."""

    agent: int = 0
    selector: int = 0
    selector_prompt_chars: int = 0


Plan = dict[str, list[tuple[str, str]]]


class Team(Protocol):
    """One group's team in a peer framework."""

    async def ask(self, text: str, prior: Sequence[Prior] = ()) -> str:
        """Run one message to one agent reply, ``prior`` given before it in the same run; the
        id of the agent that answered."""
        ...


TeamFactory = Callable[[Calls], Team]


def load_personas(agents_dir: Path, workspaces_dir: Path) -> list[Persona]:
    """Our agents from ``agents/*.yaml`` with their workspace prompt files, sorted by id."""
    personas = []
    for path in sorted(agents_dir.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        folder = workspaces_dir / spec["id"]
        prompt = "\n\n".join(
            (folder / name).read_text(encoding="utf-8").strip()
            for name in ("CLAUDE.md", "SOUL.md")
            if (folder / name).is_file()
        )
        description = " ".join(str(spec.get("description") or spec["role"]).split())
        personas.append(
            Persona(
                id=spec["id"],
                description=f"{spec['name']}, {spec['role']}: {description}",
                system_message=prompt or f"You are the team's {spec['role']}.",
            )
        )
    return personas


def workload(messages: int, groups: int, ids: Sequence[str]) -> Plan:
    """Per group, in order, (text, mentioned agent): throughput.py's distribution."""
    plan: Plan = {f"g{n}": [] for n in range(groups)}
    for n in range(messages):
        agent = ids[n % len(ids)]
        plan[f"g{n % groups}"].append((f"@{agent} message {n}", agent))
    return plan


def priors(group_index: int, count: int, ids: Sequence[str]) -> list[Prior]:
    """The ``count`` messages throughput.py stores in group ``group_index`` before it starts:
    a person's, then an agent's reply, in turn."""
    out = []
    for n in range(count):
        pair = n // 2
        if n % 2 == 0:
            text = PERSON_TEXTS[(pair + group_index) % len(PERSON_TEXTS)]
            out.append(Prior(sender="alex", text=text, agent=False))
        else:
            text = AGENT_TEXTS[(pair + group_index) % len(AGENT_TEXTS)]
            out.append(Prior(sender=ids[pair % len(ids)], text=text, agent=True))
    return out


def mentioned(text: str, names: Sequence[str]) -> str:
    """The agent named by the last ``@name`` in ``text``, else the first of ``names``."""
    at = text.rfind("@")
    name = text[at + 1 :].split(maxsplit=1)[0] if at >= 0 else ""
    return name if name in names else min(names)


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def _run_group(
    team: Team, plan: list[tuple[str, str]], prior: Sequence[Prior]
) -> list[tuple[float, bool]]:
    """One group's messages in order, ``prior`` with the first; per message its seconds and
    whether the mentioned agent answered."""
    out = []
    for n, (text, agent) in enumerate(plan):
        started = time.perf_counter()
        replier = await team.ask(text, prior if n == 0 else ())
        out.append((time.perf_counter() - started, replier == agent))
    return out


async def measure(
    factory: TeamFactory, plan: Plan, prior: dict[str, list[Prior]]
) -> dict[str, Any]:
    """Run the whole workload through one kind of team, groups concurrently.

    One message through a team of its own first, untimed, as throughput.py warms up. A group's
    prior messages go with its first message, in its run and on the clock: a team given them
    before would start (and warm up) outside the clock, where ours reads them on it.
    """
    first = next(iter(plan.values()))[0][0]
    await factory(Calls()).ask(first)
    calls = Calls()
    teams = {g: factory(calls) for g in plan}
    cpu_before = time.process_time()
    started = time.perf_counter()
    results = await asyncio.gather(*(_run_group(teams[g], plan[g], prior.get(g, ())) for g in plan))
    elapsed = time.perf_counter() - started
    cpu_ms = (time.process_time() - cpu_before) * 1000
    per_message = sorted(s for group in results for s, _ in group)
    messages = len(per_message)
    return {
        "messages": messages,
        "elapsed_s": round(elapsed, 3),
        "messages_per_s": round(messages / elapsed, 1),
        "cpu_ms_per_message": round(cpu_ms / max(messages, 1), 2),
        "run_p50_ms": round(_pct(per_message, 0.5) * 1000, 2),
        "run_p95_ms": round(_pct(per_message, 0.95) * 1000, 2),
        "mention_honoured": sum(ok for group in results for _, ok in group),
        "agent_model_calls": calls.agent,
        "selector_model_calls": calls.selector,
        "selector_prompt_chars": calls.selector_prompt_chars,
    }
