"""A batch file run over a replica set (:mod:`kalypso.core.replicas`): the requests that
share a document on one replica, the answers merged in input order.

The requests are the units, weighted by their lines' bytes. A request's affinity key is
the longest leading part of its prefix key (:func:`~kalypso.batch.lower.prefix_key`, in
whole parts) that it shares with another request, so the questions asked of one document
go to one replica. A key shared by more requests than a replica's share (requests /
replicas), such as the system prompt every request starts with, is no key: each replica
computes such a prefix once anyway, and no one replica could take all of them.

Each chunk the set hands a replica runs as a file runs on one engine: ``chunk_requests``
at a time in prefix order, on the replica's engine and ledger, each piece's answers
written to a piece file. When a replica fails, the pieces of its unfinished chunk are
discarded (their requests run again elsewhere), so no line is answered twice. Greedy
answers share one result cache across the replicas.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from kalypso.batch.chunk import run_piece
from kalypso.batch.reader import FileIndex
from kalypso.batch.result import BatchResult
from kalypso.core.hooks import RunHooks
from kalypso.core.options import RunOptions
from kalypso.core.placement import Unit
from kalypso.core.replicas import Replica, ReplicaSet, replica_failed
from kalypso.core.result_cache import PromptResultCache

logger = logging.getLogger(__name__)

KEY_PART_BYTES = 8
"""The size of one part of a prefix key (a digest)."""


def _common_parts(a: bytes, b: bytes) -> int:
    """How many leading parts the keys ``a`` and ``b`` share."""
    parts = 0
    end = KEY_PART_BYTES
    while (
        end <= min(len(a), len(b))
        and a[end - KEY_PART_BYTES : end] == b[end - KEY_PART_BYTES : end]
    ):
        parts += 1
        end += KEY_PART_BYTES
    return parts


def affinity_keys(index: FileIndex, replicas: int) -> list[bytes | None]:
    """Per request (in index order), its affinity key (see the module docstring)."""
    keys = index.keys
    shared_parts = [0] * len(keys)
    for a, b in itertools.pairwise(index.prefix_order()):
        parts = _common_parts(keys[a], keys[b])
        shared_parts[a] = max(shared_parts[a], parts)
        shared_parts[b] = max(shared_parts[b], parts)
    deepest = [
        keys[i][: parts * KEY_PART_BYTES] if parts else None for i, parts in enumerate(shared_parts)
    ]
    candidates = {key for key in deepest if key is not None}
    members: Counter[bytes] = Counter()
    for key in keys:  # requests whose key starts with a candidate
        for end in range(KEY_PART_BYTES, len(key) + 1, KEY_PART_BYTES):
            if key[:end] in candidates:
                members[key[:end]] += 1
    share = len(keys) / max(1, replicas)
    return [key if key is not None and members[key] <= share else None for key in deepest]


def request_units(index: FileIndex, replicas: int) -> list[Unit]:
    """One unit per request, weighted by its line's bytes, keyed by :func:`affinity_keys`."""
    return [
        Unit(position, affinity=key, weight=float(index.line_bytes(position)))
        for position, key in enumerate(affinity_keys(index, replicas))
    ]


async def run_on_replicas(
    index: FileIndex,
    replicas: ReplicaSet,
    *,
    chunk_requests: int,
    options: RunOptions,
    cache: PromptResultCache,
    batch_id: str,
    hooks: RunHooks | None,
    folder: Path,
    pieces: list[Path],
    result: BatchResult,
    on_piece: Callable[[], None],
) -> None:
    """Run every request of ``index`` on ``replicas``; each finished piece's file is
    appended to ``pieces`` (each in line order) and its counts added to ``result``, then
    ``on_piece()`` is called. A piece of a chunk whose replica failed is taken back.

    Raises:
        ReplicaSetError: every replica failed.
        QueryError: a chunk failed for the run's own reason.
    """
    numbers = itertools.count()

    async def run_chunk(replica: Replica, units: Sequence[Unit]) -> None:
        order = sorted(units, key=lambda u: (index.keys[u.index], u.index))
        done: list[tuple[Path, BatchResult]] = []
        owners: list[str] = []
        try:
            for start in range(0, len(order), chunk_requests):
                number = next(numbers)
                piece = folder / f"r{replica.number}-chunk-{number}.tsv"
                requests = index.read(u.index for u in order[start : start + chunk_requests])
                owner = f"{batch_id}.r{replica.number}.c{number}"
                owners.append(owner)
                counts = await run_piece(
                    requests, replica.engine, options, replica.ledger, cache, owner, piece, hooks
                )
                done.append((piece, counts))
                pieces.append(piece)
                result.add(counts)
                on_piece()
        except Exception as error:
            if replica_failed(error):
                for piece, counts in done:
                    pieces.remove(piece)
                    piece.unlink(missing_ok=True)
                    result.add(counts, times=-1)
                if hooks is not None:
                    for owner in owners:  # their requests run again elsewhere
                        hooks.drop_run(owner)
                logger.warning(
                    "batch %s: %d pieces of replica %d taken back",
                    batch_id,
                    len(done),
                    replica.number,
                )
            raise

    logger.info(
        "batch %s: %d requests on %d replicas", batch_id, index.requests, len(replicas.replicas)
    )
    await replicas.map_units(request_units(index, len(replicas.live)), run_chunk)
