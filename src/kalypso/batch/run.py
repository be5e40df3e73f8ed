"""Running a batch file on an engine or a replica set: validate it whole, then chunk by
chunk lower, run on the core (:mod:`kalypso.batch.chunk`) and write the answers in input
order.

Greedy answers go through one result cache for the whole file: a request equal to one
answered in an earlier chunk is answered from it.

Chunks are formed in the order of the requests' prefix keys (:meth:`FileIndex.chunks`),
so a chunk's answers are for lines anywhere in the file: each chunk's lines go to a
temporary file beside the output, in line order, and the files are merged in input
order at the end (reading a line of each at a time). A run that fails or is cancelled
merges the chunks it finished into ``<out>.part`` (input order, the unfinished lines
missing) and writes no ``out``. On a replica set (:mod:`kalypso.batch.replicated`) the
requests that share a document run on one replica.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from kalypso.batch.chunk import run_piece
from kalypso.batch.reader import FileIndex, check_file
from kalypso.batch.replicated import run_on_replicas
from kalypso.batch.result import BatchResult, Progress
from kalypso.core.errors import PlanError
from kalypso.core.hooks import RunHooks
from kalypso.core.ledger import KVLedger
from kalypso.core.options import WORKFLOW_POLICY, RunOptions
from kalypso.core.replicas import ReplicaSet
from kalypso.core.result_cache import PromptResultCache
from kalypso.engine.protocol import Engine

logger = logging.getLogger(__name__)

CHUNK_REQUESTS = 4096
"""Requests lowered and run together by default: the scope of the prefix ordering, and
what the run holds in memory at once."""


async def arun_batch(
    input_path: str | Path,
    output_path: str | Path,
    engine: Engine | ReplicaSet,
    *,
    error_path: str | Path | None = None,
    options: RunOptions | None = None,
    chunk_requests: int = CHUNK_REQUESTS,
    on_progress: Progress | None = None,
    index: FileIndex | None = None,
    ledger: KVLedger | None = None,
    hooks: RunHooks | None = None,
) -> BatchResult:
    """Run the OpenAI-format batch file ``input_path`` on ``engine``; answers go to
    ``output_path`` and failed lines to ``error_path`` (default ``<output>.errors.jsonl``,
    written only when a line failed), both in input order.

    ``options`` are the core's (the policy, the call timeout); ``cache-aware`` by default.
    ``index``: the file already checked (:func:`~kalypso.batch.reader.check_file`), so it
    is not read twice. ``ledger`` shares the engine with other runs (the job server's; by
    default the run has one of its own) and ``hooks`` attach a journal of calls and a
    progress listener (:mod:`kalypso.core.hooks`).

    ``engine`` may be a :class:`~kalypso.core.replicas.ReplicaSet`: the requests that
    share a document then run on one replica, each replica with its own ledger (so
    ``ledger`` must be None); the output is the one-engine run's.

    Raises:
        BatchFileError: a line is refused (line and field named); nothing was run.
        PlanError: bad options.
        ReplicaSetError: every replica failed (the lines answered are in
            ``<output>.part``).
        QueryError: the run failed (the finished chunks' lines are in ``<output>.part``).
    """
    started = time.monotonic()
    source, target = Path(input_path), Path(output_path)
    errors_to = Path(error_path) if error_path else target.with_name(target.name + ".errors.jsonl")
    if chunk_requests < 1:
        raise PlanError(f"chunk_requests must be >= 1, got {chunk_requests}")
    if target.resolve() == source.resolve():
        raise PlanError(f"the output {target} would overwrite the input")
    if isinstance(engine, ReplicaSet) and ledger is not None:
        raise PlanError("a replica set's replicas have ledgers of their own: pass no ledger")
    if index is None or index.path != source:
        index = check_file(source)
    base = options or RunOptions()
    run_options = replace(
        base, policy=base.policy or WORKFLOW_POLICY, isolate_call_errors=True, system_prompt=""
    )
    result = BatchResult(model=index.model)
    first_engine = engine.engines[0] if isinstance(engine, ReplicaSet) else engine
    cache = PromptResultCache(first_engine.name)
    batch_id = base.query_id or f"b{uuid.uuid4().hex[:8]}"  # its pieces: <batch_id>.c<n>
    hooks = hooks.merged() if hooks is not None else None  # the pieces' progress summed

    def progress() -> None:
        result.time_s = time.monotonic() - started
        if on_progress is not None:
            on_progress(result)

    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        pieces: list[Path] = []
        try:
            if isinstance(engine, ReplicaSet):
                await run_on_replicas(
                    index,
                    engine,
                    chunk_requests=chunk_requests,
                    options=run_options,
                    cache=cache,
                    batch_id=batch_id,
                    hooks=hooks,
                    folder=Path(tmp),
                    pieces=pieces,
                    result=result,
                    on_piece=progress,
                )
            else:
                ledger = ledger if ledger is not None else KVLedger(engine.capacity.num_blocks)
                for number, chunk in enumerate(index.chunks(chunk_requests)):
                    piece = Path(tmp) / f"chunk-{number}.tsv"
                    owner = f"{batch_id}.c{number}"
                    result.add(
                        await run_piece(
                            chunk, engine, run_options, ledger, cache, owner, piece, hooks
                        )
                    )
                    pieces.append(piece)
                    progress()
        except BaseException:
            _merge(pieces, target.with_name(target.name + ".part"), None)
            raise
        _merge(pieces, target, errors_to if result.failed else None)
    result.result_cache_hits = cache.stats.hits
    result.time_s = time.monotonic() - started
    logger.info("batch %s: %s", source, result.summary())
    return result


def _merge(pieces: list[Path], answers_to: Path, errors_to: Path | None) -> None:
    """Merge the chunks' lines (each piece in line order) into ``answers_to`` and, when
    given, ``errors_to``, in input order; a piece is read a line at a time."""
    handles = [piece.open(encoding="utf-8") for piece in pieces]
    try:
        rows = heapq.merge(*handles, key=lambda row: int(row.split("\t", 1)[0]))
        with contextlib.ExitStack() as stack:
            answers = stack.enter_context(answers_to.open("w", encoding="utf-8"))
            errors = stack.enter_context(errors_to.open("w")) if errors_to else None
            for row in rows:
                _, kind, text = row.split("\t", 2)
                if kind == "a":
                    answers.write(text)
                elif errors is not None:
                    errors.write(text)
    finally:
        for handle in handles:
            handle.close()
