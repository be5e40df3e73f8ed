"""What a host (the job server) attaches to a run: a journal of calls, and a listener for
progress.

Both are optional and neither changes a run's results: a journal only answers a call with
the result it recorded for the same call site and the same exact request, and a listener
only reads. The front ends pass a :class:`RunHooks` through to the runner unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, replace
from typing import Protocol

from kalypso.core.report import StageView
from kalypso.engine.protocol import GenerateRequest, GenerateResult

CallSite = tuple[str, tuple[int, ...]]
"""``(node id, instance key)``: where in a run a call is made. With the request's exact
prompt token ids it names one call across runs of the same plan over the same input."""


class CallJournal(Protocol):
    """Completed calls, kept so that a run started again does not send them again.

    ``lookup`` returns the result recorded for this site and this exact request (prompt
    token ids and decoding parameters), or None; ``record`` keeps a completed call's
    result and returns once it is durable. Both may be called concurrently from one event
    loop.
    """

    async def lookup(self, site: CallSite, request: GenerateRequest) -> GenerateResult | None:
        """The recorded result of the same call, or None."""
        ...

    async def record(
        self, site: CallSite, request: GenerateRequest, result: GenerateResult
    ) -> None:
        """Keep ``result`` durably before returning."""
        ...


ProgressListener = Callable[[int, list[StageView]], None]
"""Called with ``(pipeline number from 1, one view per stage)`` whenever the scheduler
updates its view; it must not block."""


class MergedProgress:
    """One job's progress listener fed by several runs at once (its chunks on replicas, a
    batch file's pieces): each run's latest views are kept apart, and ``listener`` is
    called with their sums per stage. A run whose work is done again elsewhere (a failed
    replica's chunk) is taken out with :meth:`drop`."""

    def __init__(self, listener: ProgressListener) -> None:
        self.listener = listener
        self._views: dict[int, dict[str, list[StageView]]] = {}
        """Per pipeline number, each run's latest views."""

    def of_run(self, run: str) -> ProgressListener:
        """The listener of the run named ``run``."""

        def update(pipeline: int, views: list[StageView]) -> None:
            self._views.setdefault(pipeline, {})[run] = list(views)
            self._show(pipeline)

        return update

    def __call__(self, pipeline: int, views: list[StageView]) -> None:
        """A run not bound with :meth:`of_run` reports as the run named ``""``."""
        self.of_run("")(pipeline, views)

    def drop(self, run: str) -> None:
        """Forget the run named ``run`` and the runs named ``run.<part>`` (their views no
        longer count)."""
        for pipeline, runs in self._views.items():
            gone = [name for name in runs if name == run or name.startswith(run + ".")]
            for name in gone:
                del runs[name]
            if gone:
                self._show(pipeline)

    def _show(self, pipeline: int) -> None:
        self.listener(pipeline, summed_views(self._views[pipeline].values()))


def summed_views(runs: Iterable[list[StageView]]) -> list[StageView]:
    """Per stage, the sum of the runs' views (a run with fewer stages counts none there)."""
    stages = itertools.zip_longest(*runs, fillvalue=StageView())
    return [
        StageView(
            done=sum(v.done for v in views),
            waiting=sum(v.waiting for v in views),
            running=sum(v.running for v in views),
            budget_blocks=sum(v.budget_blocks for v in views),
            used_blocks=sum(v.used_blocks for v in views),
        )
        for views in stages
    ]


class Withdrawable(Protocol):
    """A running scheduler core, as a replica set's stealing sees it
    (:meth:`~kalypso.core.scheduler.SchedulerCore.withdraw`)."""

    def untouched_roots(self) -> set[int]: ...

    def withdraw(self, roots: Set[int]) -> set[int]: ...


class ChunkLink(Protocol):
    """A replica set's link to the run of one chunk
    (:class:`~kalypso.core.replicas.RunningChunk`): the run's pipeline attaches its
    scheduler core while it runs, so that an idle replica may take back the units the
    run has not started."""

    def attach(self, core: Withdrawable) -> None: ...

    def detach(self, core: Withdrawable) -> None: ...


@dataclass(frozen=True)
class RunHooks:
    """A run's journal and progress listener (each optional), and, for a chunk of a
    replica set's run, its link to the set (``chunk``)."""

    journal: CallJournal | None = None
    on_progress: ProgressListener | None = None
    chunk: ChunkLink | None = None

    def merged(self) -> RunHooks:
        """These hooks for a job of several runs: the listener becomes a
        :class:`MergedProgress` (unless it is one), to be bound with :meth:`for_run`."""
        if self.on_progress is None or isinstance(self.on_progress, MergedProgress):
            return self
        return replace(self, on_progress=MergedProgress(self.on_progress))

    def for_run(self, run: str) -> RunHooks:
        """The hooks of the run named ``run`` of a job of several runs (see :meth:`merged`)."""
        if isinstance(self.on_progress, MergedProgress):
            return replace(self, on_progress=self.on_progress.of_run(run))
        return self

    def drop_run(self, run: str) -> None:
        """Take the run named ``run`` (and ``run.<part>``) out of the job's progress (its
        work is done again)."""
        if isinstance(self.on_progress, MergedProgress):
            self.on_progress.drop(run)
