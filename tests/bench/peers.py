"""Peer comparison: the throughput workload through our daemon, AutoGen AgentChat's group chats
and Microsoft Agent Framework's group chat, side by side in one run.

    python tests/bench/peers.py [--messages N] [--groups G] [--realistic] [--daemons D]
        [--broker auto|mosquitto|embedded] [--json OUT]

The workload is ``throughput.py``'s: N messages over G groups, message n in group ``g{n % G}``
mentioning agent ``n % 4``, one reply each, zero-latency model everywhere. Measured in turn:

* ours: ``throughput.py --messages N --groups G --agents 4 --daemons D`` in a subprocess (D:
  as many daemons as ``arena up`` runs by default, two with two cores or more; offline provider;
  four bench agents with our roles' identity files), end to end and durable: through Redis,
  stored in SQLite, published on MQTT. Run first and again last, so that the machine's drift
  shows; the ratios use the mean of the two. With D > 1 ours runs once more at the end with one
  daemon, reported beside it (``ratio_one_daemon_…``);
* AutoGen AgentChat ``SelectorGroupChat`` and ``RoundRobinGroupChat`` (``peer_autogen.py``);
* Microsoft Agent Framework ``GroupChatBuilder`` with a selection function and with a manager
  agent (``peer_maf.py``).

The peers run in this process and in memory, one team per group with our four agents (ids,
descriptions, ``CLAUDE.md`` + ``SOUL.md`` as instructions); groups run concurrently, one
group's messages in order, each message one run that stops after one agent reply; one message
through a team of its own first, untimed, as throughput.py warms up. "mention ok" counts the
replies that came from the mentioned agent; "cpu ms" is the daemon's CPU per message for ours,
this process's for the peers.

``--realistic`` runs ours with ``--history 20 --realistic`` (20 stored messages, 50 session
memories of which 2 pinned per group, today's personal log for each agent) instead of
``--history 0``; each peer team gets the same 20 prior messages with its group's first
message, in that run (neither framework stores a message without a run) and on the clock, as
ours reads them on it. The peers have no memories or logs to read.

The peers need the optional ``bench`` extra (``make bench`` installs it); a framework that is
not installed is reported as skipped and the rest runs. Prints a table, writes JSON with
--json, and ends with one line ``ours_messages_per_s=… selector_messages_per_s=… …
ratio_selector=… ratio_roundrobin=… ratio_maf_selection=… ratio_maf_manager=…`` (ratio = ours
/ theirs, ``skipped`` when that peer did not run). Exits 1 when the daemon or a peer fails.
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
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench import peer_autogen, peer_maf  # noqa: E402
from tests.bench.peer_workload import (  # noqa: E402
    REPLY,
    Persona,
    Plan,
    Prior,
    TeamFactory,
    load_personas,
    measure,
    priors,
    workload,
)
from tests.bench.throughput import add_broker_option  # noqa: E402

THROUGHPUT = REPO / "tests" / "bench" / "throughput.py"
HISTORY = 20  # prior messages per group with --realistic
SKIPPED = "skipped (the bench extra: make bench installs it)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    """One column of the comparison: a framework's team kind."""

    key: str
    framework: str
    mode: str
    distribution: str
    available: bool
    note: str

    def factory(self, personas: list[Persona]) -> TeamFactory:
        if self.key in ("selector", "roundrobin"):
            return peer_autogen.factory(self.key, personas)  # type: ignore[arg-type]
        return peer_maf.factory(self.key.removeprefix("maf_"), personas)  # type: ignore[arg-type]


PEERS = (
    Peer(
        key="selector",
        framework="AutoGen",
        mode="SelectorGroupChat",
        distribution=peer_autogen.DISTRIBUTION,
        available=peer_autogen.AVAILABLE,
        note="in process, in memory; + one selector model call per message",
    ),
    Peer(
        key="roundrobin",
        framework="AutoGen",
        mode="RoundRobinGroupChat",
        distribution=peer_autogen.DISTRIBUTION,
        available=peer_autogen.AVAILABLE,
        note="in process, in memory; speaker by turn, not by mention",
    ),
    Peer(
        key="maf_selection",
        framework="Agent Fwk",
        mode="GroupChat selection fn",
        distribution=peer_maf.DISTRIBUTION,
        available=peer_maf.AVAILABLE,
        note="in process, in memory; a function picks the mentioned agent",
    ),
    Peer(
        key="maf_manager",
        framework="Agent Fwk",
        mode="GroupChat manager",
        distribution=peer_maf.DISTRIBUTION,
        available=peer_maf.AVAILABLE,
        note="in process, in memory; + one manager model call per message",
    ),
)
OURS_NOTE = "end to end and durable: Redis in and out, SQLite, MQTT"


def run_ours(
    messages: int, groups: int, agents: int, realistic: bool, daemons: int = 1, broker: str = "auto"
) -> dict[str, Any]:
    """Our daemon's rate on the workload, measured by throughput.py in a subprocess (its
    progress on this process's stderr).

    Raises:
        RuntimeError: throughput.py failed (its output is written to stderr first).
    """
    with tempfile.TemporaryDirectory(prefix="arena-peer-") as tmp:
        out = Path(tmp) / "throughput.json"
        command = [sys.executable, str(THROUGHPUT), "--messages", str(messages)]
        command += ["--groups", str(groups), "--agents", str(agents), "--json", str(out)]
        command += ["--history", str(HISTORY), "--realistic"] if realistic else ["--history", "0"]
        command += ["--daemons", str(daemons), "--broker", broker]
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0 or not out.is_file():
            sys.stderr.write(done.stdout)
            raise RuntimeError(f"throughput.py failed with exit code {done.returncode}")
        report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    row = report["rows"][0]
    return {
        "messages": row["messages"],
        "elapsed_s": row["seconds"],
        "messages_per_s": row["messages_per_s"],
        "cpu_ms_per_message": row["cpu_ms_per_message"],
        "history": row["history"],
        "daemons": daemons,
        "broker": row["broker"],
        "throughput": report,
    }


def run_peer(
    peer: Peer, personas: list[Persona], plan: Plan, prior: dict[str, list[Prior]]
) -> dict[str, Any]:
    """One peer's row: measured, skipped (not installed) or failed (the error)."""
    if not peer.available:
        return {"skipped": SKIPPED}
    print(f"peers: {peer.framework} {peer.mode}", file=sys.stderr, flush=True)
    try:
        return asyncio.run(measure(peer.factory(personas), plan, prior))
    except Exception as exc:  # a peer's failure is reported, the others still run
        return {"failed": f"{type(exc).__name__}: {exc}"[:300]}


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _ratio(ours: float, row: dict[str, Any]) -> float | str:
    if "messages_per_s" not in row:
        return "skipped" if "skipped" in row else "failed"
    return round(ours / float(row["messages_per_s"]), 2)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def print_table(report: dict[str, Any]) -> None:
    """The comparison table: ours first and last, then one row per peer."""
    versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in report["versions"].items())
    print(
        f"peer comparison: {report['messages']} messages over {report['groups']} groups, "
        f"{len(report['agents'])} agents{', realistic' if report['realistic'] else ''} "
        f"({report['machine']}; load {report['load_before']} before, {report['load_after']} "
        f"after; {versions})"
    )
    print(
        f"{'framework':<12} {'mode':<23} {'messages':>8} {'seconds':>8} {'msg/s':>8}"
        f" {'cpu ms':>7} {'ours x':>7} {'mention ok':>10}  what is measured"
    )
    daemons = f"{report['daemons']} daemon{'s' if report['daemons'] > 1 else ''}"
    broker = report["ours_first"].get("broker", "?")
    ours_note = f"{OURS_NOTE} ({broker})"
    rows: list[tuple[str, str, dict[str, Any], str | None, str]] = [
        ("Agent Arena", f"{daemons} (first)", report["ours_first"], None, ours_note)
    ]
    rows += [(p.framework, p.mode, report[p.key], p.key, p.note) for p in PEERS]
    rows.append(("Agent Arena", f"{daemons} (last)", report["ours_last"], None, ours_note))
    if "ours_one_daemon" in report:
        note = "the same with one daemon (ours x: against it)"
        rows.append(("Agent Arena", "1 daemon", report["ours_one_daemon"], "one", note))
    for framework, mode, row, key, note in rows:
        if "messages_per_s" not in row:
            print(f"{framework:<12} {mode:<23} {row.get('skipped') or row.get('failed')}")
            continue
        ratio = (
            "-" if key is None else _one_ratios(report) if key == "one" else report[f"ratio_{key}"]
        )
        honoured = row.get("mention_honoured", "-")  # ours: routing has tests of its own
        print(
            f"{framework:<12} {mode:<23} {row['messages']:>8} {row['elapsed_s']:>8.2f}"
            f" {row['messages_per_s']:>8.1f} {row['cpu_ms_per_message']:>7.2f} {ratio!s:>7}"
            f" {honoured!s:>10}  {note}"
        )
    print(
        f"ours x = mean of ours first and last ({report['ours_messages_per_s']} msg/s) / theirs. "
        "Model: zero latency everywhere; ours the offline provider, the peers a client that "
        f"answers {REPLY!r} at once and, asked who speaks next, names the mentioned agent"
    )


def _one_ratios(report: dict[str, Any]) -> str:
    """Ours with one daemon over the first measured peer (the selector), for the table."""
    return str(report.get("ratio_one_daemon_selector", "-"))


def summary_line(report: dict[str, Any]) -> str:
    parts = [f"ours_messages_per_s={report['ours_messages_per_s']}"]
    parts += [f"ours_first={report['ours_first']['messages_per_s']}"]
    parts += [f"ours_last={report['ours_last']['messages_per_s']}"]
    for p in PEERS:
        rate = report[p.key].get("messages_per_s", report[f"ratio_{p.key}"])
        parts.append(f"{p.key}_messages_per_s={rate}")
    parts += [f"ratio_{p.key}={report[f'ratio_{p.key}']}" for p in PEERS]
    if "ours_one_daemon" in report:
        parts.append(
            f"ours_one_daemon_messages_per_s={report['ours_one_daemon']['messages_per_s']}"
        )
        parts += [f"ratio_one_daemon_{p.key}={report[f'ratio_one_daemon_{p.key}']}" for p in PEERS]
    return " ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument(
        "--realistic",
        action="store_true",
        help=f"{HISTORY} prior messages per group for everyone; memories and logs for ours",
    )
    parser.add_argument(
        "--daemons",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="our daemon processes, as `arena up` runs them by default (more than one: ours "
        "is also measured with one, after the rest)",
    )
    add_broker_option(parser)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.messages < 1 or args.groups < 1 or args.daemons < 1:
        parser.error("--messages, --groups and --daemons must be at least 1")
    personas = load_personas(REPO / "agents", REPO / "workspaces")
    ids = [p.id for p in personas]
    plan = workload(args.messages, args.groups, ids)
    prior = {g: priors(n, HISTORY, ids) for n, g in enumerate(plan)} if args.realistic else {}
    load_before = _load()
    results: dict[str, Any] = {}
    try:
        ours_args = (args.messages, args.groups, len(ids), args.realistic)
        results["ours_first"] = run_ours(*ours_args, daemons=args.daemons, broker=args.broker)
        for peer in PEERS:
            results[peer.key] = run_peer(peer, personas, plan, prior)
        results["ours_last"] = run_ours(*ours_args, daemons=args.daemons, broker=args.broker)
        if args.daemons > 1:
            results["ours_one_daemon"] = run_ours(*ours_args, daemons=1, broker=args.broker)
    except RuntimeError as exc:
        print(f"peers: {exc}", file=sys.stderr)
        return 1
    ours = round(
        (results["ours_first"]["messages_per_s"] + results["ours_last"]["messages_per_s"]) / 2, 1
    )
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "load_before": load_before,
        "load_after": _load(),
        "versions": {d: _version(d) for d in dict.fromkeys(p.distribution for p in PEERS)},
        "messages": args.messages,
        "groups": args.groups,
        "realistic": args.realistic,
        "agents": ids,
        "daemons": args.daemons,
        "ours_messages_per_s": ours,
        **results,
        **{f"ratio_{p.key}": _ratio(ours, results[p.key]) for p in PEERS},
    }
    if "ours_one_daemon" in results:
        one = results["ours_one_daemon"]["messages_per_s"]
        report |= {f"ratio_one_daemon_{p.key}": _ratio(one, results[p.key]) for p in PEERS}
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(summary_line(report))
    return 1 if any("failed" in results[p.key] for p in PEERS) else 0


if __name__ == "__main__":
    sys.exit(main())
