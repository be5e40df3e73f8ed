"""The live view: per stage, tasks done/waiting/running, budget and KV in use, with the
run's prefix-cache hit rate so far."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

from kalypso.core.hooks import ProgressListener
from kalypso.core.report import StageView


class ProgressView:
    """A rich live table updated by the scheduler; a no-op when disabled. ``listener``
    (:data:`~kalypso.core.hooks.ProgressListener`) receives every update either way."""

    def __init__(
        self,
        *,
        enabled: bool,
        console: Console | None = None,
        hit_rate: Callable[[], tuple[int, int]] | None = None,
        listener: ProgressListener | None = None,
    ) -> None:
        self._enabled = enabled
        self._listener = listener
        self._hit_rate = hit_rate
        self._live: Live | None = None
        self._console = console or Console(stderr=True)

    def __enter__(self) -> ProgressView:
        if self._enabled:
            self._live = Live(Table(), console=self._console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(kind, error, tb)

    def update(self, pipeline: int, views: list[StageView]) -> None:
        """Show ``views`` (when enabled) and pass them to the listener (when given)."""
        if self._listener is not None:
            self._listener(pipeline, views)
        if self._live is None:
            return
        title = f"pipeline {pipeline}"
        if self._hit_rate is not None:
            cached, prompt = self._hit_rate()
            if prompt:
                title += f" - prefix-cache hits {cached / prompt:.0%} of {prompt} prompt tokens"
        table = Table(title=title)
        for header in (
            "stage",
            "done",
            "waiting",
            "running",
            "budget (blocks)",
            "KV held (blocks)",
        ):
            table.add_column(header, justify="right")
        for number, view in enumerate(views, start=1):
            table.add_row(
                str(number),
                str(view.done),
                str(view.waiting),
                str(view.running),
                str(view.budget_blocks),
                str(view.used_blocks),
            )
        self._live.update(table)
