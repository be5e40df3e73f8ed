"""Where the units of a replicated run go first: by prefix affinity, balanced by work.

A *unit* is what runs whole on one replica: a table row's pipeline, a workflow query's
calls, the requests of a batch file that share a document. Units with one affinity key
share a prompt prefix beyond the static ones (a document, a conversation); they are
placed together, so that prefix is computed on one replica only. Units without a key
share only static prefixes, which every replica computes once.

:func:`place` is a longest-processing-time-first assignment of affinity groups: the
heaviest group goes to the least loaded replica, preferring one where its key is already
warm while that replica's load stays within ``warm_slack`` of the least. Within a replica
the units keep the single-engine order, so neighbours' prefixes meet in its cache.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

WARM_SLACK = 0.25
"""A group goes to a replica where its key is warm while that replica's load is within
this fraction of the least loaded one's (plus the group's own weight)."""


@dataclass(frozen=True)
class Unit:
    """One unit of a replicated run.

    Attributes:
        index: its position in the single-engine order (results are merged by it).
        affinity: the key of the prefix it shares with other units, or None.
        weight: its expected work, in any unit proportional to time (prompt tokens).
    """

    index: int
    affinity: Hashable | None = None
    weight: float = 1.0


def place(
    units: Sequence[Unit],
    replicas: int,
    *,
    warm: Sequence[set[Hashable]] | None = None,
    warm_slack: float = WARM_SLACK,
) -> list[list[Unit]]:
    """Each replica's units, in index order (see the module docstring).

    Args:
        units: the units, with distinct indexes.
        replicas: how many replicas (at least 1).
        warm: per replica, the affinity keys already in its cache.
        warm_slack: see :data:`WARM_SLACK`.
    """
    if replicas < 1:
        raise ValueError(f"place needs at least one replica, got {replicas}")
    groups: dict[Hashable, list[Unit]] = {}
    for unit in units:
        key = ("unit", unit.index) if unit.affinity is None else ("key", unit.affinity)
        groups.setdefault(key, []).append(unit)
    load = [0.0] * replicas
    placed: list[list[Unit]] = [[] for _ in range(replicas)]
    ordered = sorted(groups.values(), key=lambda g: (-sum(u.weight for u in g), g[0].index))
    for group in ordered:
        weight = sum(u.weight for u in group)
        least = min(range(replicas), key=lambda r: (load[r], r))
        target = least
        affinity = group[0].affinity
        if warm is not None and affinity is not None:
            limit = load[least] * (1 + warm_slack) + weight
            candidates = [r for r in range(replicas) if affinity in warm[r] and load[r] <= limit]
            if candidates:
                target = min(candidates, key=lambda r: (load[r], r))
        placed[target].extend(group)
        load[target] += weight
    logger.debug(
        "placed %d units in %d groups on %d replicas: loads %s",
        len(units),
        len(groups),
        replicas,
        load,
    )
    return [queue_order(queue) for queue in placed]


def queue_order(units: Sequence[Unit]) -> list[Unit]:
    """``units`` in single-engine order, except that an affinity group stays contiguous
    (at the place of its first unit), so a queue can be cut between groups."""
    first: dict[Hashable, int] = {}
    for unit in sorted(units, key=lambda u: u.index):
        if unit.affinity is not None:
            first.setdefault(unit.affinity, unit.index)
    return sorted(
        units, key=lambda u: (u.index if u.affinity is None else first[u.affinity], u.index)
    )
