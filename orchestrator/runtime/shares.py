"""How many partitions each daemon should own, and which: pure functions, no I/O.

Every live daemon aims at the same fair share, ``ceil(partitions / daemons)``. One that holds
more gives the surplus back; one that holds fewer takes free partitions, starting at a point
that depends on its rank so that daemons starting together reach for different ones first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Plan", "fair_share", "plan"]


def fair_share(partitions: int, daemons: int) -> int:
    """The most partitions one of ``daemons`` live daemons should own."""
    if partitions < 1:
        raise ValueError("there must be at least one partition")
    return math.ceil(partitions / max(daemons, 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """One round's decision for one daemon."""

    release: tuple[int, ...]  # partitions to give back once their work in hand is done
    take: int  # how many free partitions to take at most
    order: tuple[int, ...]  # the partitions to try, in this order (those not held)


def plan(held: set[int], me: str, members: list[str], partitions: int) -> Plan:
    """What a daemon holding ``held`` should do, with ``members`` alive (``me`` among them)."""
    alive = sorted(set(members) | {me})
    share = fair_share(partitions, len(alive))
    rank = alive.index(me)
    start = (rank * share) % partitions
    order = tuple(p for i in range(partitions) if (p := (start + i) % partitions) not in held)
    if len(held) > share:
        # Give back the ones farthest from this daemon's starting point.
        by_distance = sorted(held, key=lambda p: (p - start) % partitions)
        return Plan(release=tuple(by_distance[share:]), take=0, order=order)
    return Plan(release=(), take=share - len(held), order=order)
