"""What a host (the job server) attaches to a run: a journal of calls, and a listener for
progress.

Both are optional and neither changes a run's results: a journal only answers a call with
the result it recorded for the same call site and the same exact request, and a listener
only reads. The front ends pass a :class:`RunHooks` through to the runner unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class RunHooks:
    """A run's journal and progress listener (each optional)."""

    journal: CallJournal | None = None
    on_progress: ProgressListener | None = None
