"""Peer comparison: the throughput workload through AutoGen AgentChat's group chats.

    python tests/bench/peer_autogen.py [--messages N] [--groups G] [--json OUT]

The same workload as ``throughput.py`` (N messages over G groups, message n in group
``g{n % G}`` mentioning agent ``n % 4``, one reply each), three ways in one run:

* ours: ``throughput.py --messages N --groups G --agents 4 --history 0`` in a subprocess
  (offline provider, zero latency; four bench agents with our roles' identity files): end to
  end and durable, through Redis, stored in SQLite, published on MQTT;
* AutoGen AgentChat ``SelectorGroupChat`` and ``RoundRobinGroupChat``: in process and in memory,
  one team per group with our four agents (ids, descriptions, ``CLAUDE.md`` + ``SOUL.md`` as the
  system message), each message one ``team.run(task=...)`` that stops after one agent reply.
  Groups run concurrently, one group's messages in order. The model is a zero-latency client:
  agents get a fixed short answer; the selector's own model call (SelectorGroupChat asks the
  model who speaks next) goes to the same kind of client, which names the mentioned agent.

"mention ok" counts the replies that came from the mentioned agent: RoundRobinGroupChat picks
the speaker by turn, so it does no routing at all. Needs the optional ``bench`` extra
(``pip install -e '.[bench]'``); without it, says so and exits 0 with ``skipped=1``. Prints a
table, writes JSON with --json, and ends with one line ``ours_messages_per_s=…
selector_messages_per_s=… roundrobin_messages_per_s=… ratio_selector=…
ratio_roundrobin=…`` (ratio = ours / theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import yaml

try:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import ChatAgent, Team
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import BaseGroupChat, RoundRobinGroupChat, SelectorGroupChat
    from autogen_core import CancellationToken
    from autogen_core.models import (
        ChatCompletionClient,
        CreateResult,
        LLMMessage,
        ModelCapabilities,
        ModelFamily,
        ModelInfo,
        RequestUsage,
    )
    from autogen_core.tools import Tool, ToolSchema
    from pydantic import BaseModel
except ModuleNotFoundError as exc:  # the optional `bench` extra is not installed
    if not (exc.name or "").startswith("autogen"):
        raise
    HAVE_AUTOGEN = False
else:
    HAVE_AUTOGEN = True

REPO = Path(__file__).resolve().parents[2]
THROUGHPUT = REPO / "tests" / "bench" / "throughput.py"
REPLY = "Noted, I will take it from here."
MISSING = "peer_autogen: AutoGen AgentChat is not installed; pip install -e '.[bench]'"
Mode = Literal["selector", "roundrobin"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Persona:
    """One of our agents as AutoGen sees it."""

    id: str
    description: str
    system_message: str


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


def workload(messages: int, groups: int, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """Per group, in order, (text, mentioned agent): throughput.py's distribution."""
    plan: dict[str, list[tuple[str, str]]] = {f"g{n}": [] for n in range(groups)}
    for n in range(messages):
        agent = ids[n % len(ids)]
        plan[f"g{n % groups}"].append((f"@{agent} message {n}", agent))
    return plan


if HAVE_AUTOGEN:

    class InstantClient(ChatCompletionClient):
        """A model that answers at once: the mentioned agent's name, or a fixed reply.

        With ``names`` it plays SelectorGroupChat's selector and returns the last ``@name`` in
        the prompt (the prompt ends with the latest message); without, it returns ``REPLY``.
        """

        def __init__(self, names: Sequence[str] = ()) -> None:
            self._names = frozenset(names)
            self.calls = 0
            self.prompt_chars = 0

        def _answer(self, messages: Sequence[LLMMessage]) -> CreateResult:
            self.calls += 1
            text = str(messages[-1].content) if messages else ""
            self.prompt_chars += sum(len(str(m.content)) for m in messages)
            content = REPLY
            if self._names:
                at = text.rfind("@")
                mentioned = text[at + 1 :].split(maxsplit=1)[0] if at >= 0 else ""
                content = mentioned if mentioned in self._names else min(self._names)
            return CreateResult(
                finish_reason="stop",
                content=content,
                usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                cached=False,
            )

        async def create(
            self,
            messages: Sequence[LLMMessage],
            *,
            tools: Sequence[Tool | ToolSchema] = (),
            tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
            json_output: bool | type[BaseModel] | None = None,
            extra_create_args: Mapping[str, Any] = {},
            cancellation_token: CancellationToken | None = None,
        ) -> CreateResult:
            return self._answer(messages)

        async def create_stream(
            self,
            messages: Sequence[LLMMessage],
            *,
            tools: Sequence[Tool | ToolSchema] = (),
            tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
            json_output: bool | type[BaseModel] | None = None,
            extra_create_args: Mapping[str, Any] = {},
            cancellation_token: CancellationToken | None = None,
        ) -> AsyncGenerator[str | CreateResult, None]:
            yield self._answer(messages)

        async def close(self) -> None:
            return None

        def actual_usage(self) -> RequestUsage:
            return RequestUsage(prompt_tokens=0, completion_tokens=0)

        def total_usage(self) -> RequestUsage:
            return RequestUsage(prompt_tokens=0, completion_tokens=0)

        def count_tokens(
            self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()
        ) -> int:
            return sum(len(str(m.content)) // 4 for m in messages)

        def remaining_tokens(
            self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()
        ) -> int:
            return 200_000 - self.count_tokens(messages)

        @property
        def capabilities(self) -> ModelCapabilities:  # deprecated in the base class
            return {"vision": False, "function_calling": False, "json_output": False}

        @property
        def model_info(self) -> ModelInfo:
            return {
                "vision": False,
                "function_calling": False,
                "json_output": False,
                "family": ModelFamily.UNKNOWN,
                "structured_output": False,
            }

    def build_team(
        mode: Mode,
        personas: Sequence[Persona],
        agent_client: InstantClient,
        selector: InstantClient,
    ) -> BaseGroupChat:
        """One group's team: our agents, stopping after the task plus one agent reply."""
        agents: list[ChatAgent | Team] = [
            AssistantAgent(
                p.id,
                model_client=agent_client,
                description=p.description,
                system_message=p.system_message,
            )
            for p in personas
        ]
        stop = MaxMessageTermination(2)
        if mode == "selector":
            # Our router lets the mentioned agent answer even if it answered the last message.
            return SelectorGroupChat(
                agents,
                model_client=selector,
                termination_condition=stop,
                allow_repeated_speaker=True,
            )
        return RoundRobinGroupChat(agents, termination_condition=stop)

    async def run_group(
        team: BaseGroupChat, plan: list[tuple[str, str]]
    ) -> list[tuple[float, bool]]:
        """Run one group's messages in order; per message its seconds and whether the mentioned
        agent answered."""
        out = []
        for text, agent in plan:
            started = time.perf_counter()
            result = await team.run(task=text)
            elapsed = time.perf_counter() - started
            replies = [m for m in result.messages if m.source != "user"]
            if len(replies) != 1:
                raise RuntimeError(f"expected one reply to {text!r}, got {len(replies)}")
            out.append((elapsed, replies[0].source == agent))
        return out

    async def measure(
        mode: Mode, personas: Sequence[Persona], plan: dict[str, list[tuple[str, str]]]
    ) -> dict[str, Any]:
        """Run the whole workload through one team kind; groups concurrently.

        One message through a team of its own first, untimed, as throughput.py warms up.
        """
        warm = InstantClient(names=[p.id for p in personas])
        await run_group(build_team(mode, personas, warm, warm), [next(iter(plan.values()))[0]])
        agent_client = InstantClient()
        selector = InstantClient(names=[p.id for p in personas])
        teams = {g: build_team(mode, personas, agent_client, selector) for g in plan}
        started = time.perf_counter()
        results = await asyncio.gather(*(run_group(teams[g], plan[g]) for g in plan))
        elapsed = time.perf_counter() - started
        per_message = sorted(s for group in results for s, _ in group)
        messages = len(per_message)
        return {
            "messages": messages,
            "elapsed_s": round(elapsed, 3),
            "messages_per_s": round(messages / elapsed, 1),
            "run_p50_ms": round(_pct(per_message, 0.5) * 1000, 2),
            "run_p95_ms": round(_pct(per_message, 0.95) * 1000, 2),
            "mention_honoured": sum(ok for group in results for _, ok in group),
            "agent_model_calls": agent_client.calls,
            "selector_model_calls": selector.calls,
            "selector_prompt_chars": selector.prompt_chars,
        }


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


def run_ours(messages: int, groups: int, agents: int) -> dict[str, Any]:
    """Our daemon's rate on the same workload, measured by throughput.py in a subprocess.

    With no stored history (``--history 0``), as the AutoGen teams start empty.
    """
    with tempfile.TemporaryDirectory(prefix="arena-peer-") as tmp:
        out = Path(tmp) / "throughput.json"
        command = [sys.executable, str(THROUGHPUT), "--messages", str(messages)]
        command += ["--groups", str(groups), "--agents", str(agents), "--json", str(out)]
        if "--history" in THROUGHPUT.read_text(encoding="utf-8"):  # older versions lack it
            command += ["--history", "0"]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.is_file():
            sys.stderr.write(done.stdout + done.stderr)
            raise RuntimeError(f"throughput.py failed with exit code {done.returncode}")
        report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    row = (report.get("rows") or [report])[0]
    return {
        "messages": row.get("messages", messages),
        "elapsed_s": row.get("seconds", row.get("elapsed_s")),
        "messages_per_s": report["messages_per_s"],
        "history": row.get("history", 0),
        "throughput": report,
    }


async def measure_autogen(
    personas: Sequence[Persona], plan: dict[str, list[tuple[str, str]]]
) -> dict[Mode, dict[str, Any]]:
    """SelectorGroupChat, then RoundRobinGroupChat, on the same plan."""
    return {mode: await measure(mode, personas, plan) for mode in ("selector", "roundrobin")}


def _ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 2) if theirs else 0.0


NOTES = {
    "ours": "end to end and durable: Redis in and out, SQLite, MQTT",
    "selector": "in process, in memory; + one selector model call per message",
    "roundrobin": "in process, in memory; speaker by turn, not by mention",
}


def print_table(report: dict[str, Any]) -> None:
    """The comparison table: one row per framework and mode."""
    rows = [
        ("Agent Arena", "daemon", report["ours"], "", NOTES["ours"]),
        ("AutoGen", "SelectorGroupChat", report["selector"], "selector", NOTES["selector"]),
        ("AutoGen", "RoundRobinGroupChat", report["roundrobin"], "roundrobin", NOTES["roundrobin"]),
    ]
    print(
        f"peer comparison: {report['messages']} messages over {report['groups']} groups, "
        f"{len(report['agents'])} agents ({report['machine']}, "
        f"autogen-agentchat {report['autogen_version']})"
    )
    print(
        f"{'framework':<12} {'mode':<20} {'messages':>8} {'seconds':>8} {'msg/s':>8}"
        f" {'ours/theirs':>11} {'mention ok':>10}  what is measured"
    )
    for framework, mode, row, key, note in rows:
        ratio = f"{report[f'ratio_{key}']:.2f}" if key else "-"
        honoured = row.get("mention_honoured", "-")  # ours: routing has tests of its own
        print(
            f"{framework:<12} {mode:<20} {row['messages']:>8} {row['elapsed_s']:>8.2f}"
            f" {row['messages_per_s']:>8.1f} {ratio:>11} {honoured:>10}  {note}"
        )
    print(
        "model: zero latency on both sides; ours the offline provider, AutoGen a client that "
        f"answers {REPLY!r} at once and, asked by SelectorGroupChat who speaks next, names the "
        "mentioned agent"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not HAVE_AUTOGEN:
        print(MISSING)
        if args.json:
            args.json.write_text(json.dumps({"skipped": 1, "reason": MISSING}, indent=2))
        print("skipped=1")
        return 0
    personas = load_personas(REPO / "agents", REPO / "workspaces")
    plan = workload(args.messages, args.groups, [p.id for p in personas])
    try:
        ours = run_ours(args.messages, args.groups, len(personas))
    except RuntimeError as exc:
        print(f"peer_autogen: {exc}", file=sys.stderr)
        return 1
    theirs = asyncio.run(measure_autogen(personas, plan))
    selector, roundrobin = theirs["selector"], theirs["roundrobin"]
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "autogen_version": version("autogen-agentchat"),
        "messages": args.messages,
        "groups": args.groups,
        "agents": [p.id for p in personas],
        "ours": ours,
        "selector": selector,
        "roundrobin": roundrobin,
        "ratio_selector": _ratio(ours["messages_per_s"], selector["messages_per_s"]),
        "ratio_roundrobin": _ratio(ours["messages_per_s"], roundrobin["messages_per_s"]),
        "notes": NOTES,
    }
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(
        f"ours_messages_per_s={ours['messages_per_s']}"
        f" selector_messages_per_s={selector['messages_per_s']}"
        f" roundrobin_messages_per_s={roundrobin['messages_per_s']}"
        f" ratio_selector={report['ratio_selector']}"
        f" ratio_roundrobin={report['ratio_roundrobin']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
