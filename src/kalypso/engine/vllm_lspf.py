"""Longest shared prefix first (LSPF) on stock vLLM: a baseline of the workflow paper
(Helium, section 7), as a scheduler subclass loaded through ``scheduler_cls``.

``VLLMSettings(scheduler_cls=LSPF_SCHEDULER_CLS)`` (or ``--scheduler-cls`` for a server)
replaces vLLM's waiting queue by one that, whenever vLLM takes its next waiting request,
takes the one with the most leading prompt blocks already in the prefix cache; ties go to
vLLM's own order (priority, then arrival). Requests are otherwise scheduled exactly as
usual. The queue remembers the request it showed vLLM (``peek``) and hands out that one
(``pop``), so an eviction between the two cannot swap them.

vLLM internals relied on (vLLM 0.32): ``Scheduler.waiting`` (a ``RequestQueue``),
``PriorityRequestQueue``, ``Request.block_hashes``, ``Request.priority`` /
``arrival_time``, ``KVCacheManager.block_pool.get_cached_block`` and the KV cache groups
of ``kv_cache_config``. Importing this module does not import vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.v1.core.sched.scheduler import Scheduler

LSPF_SCHEDULER_CLS = "kalypso.engine.vllm_lspf.LSPFScheduler"


def _build() -> type[Scheduler]:
    from vllm.v1.core.sched.request_queue import PriorityRequestQueue
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import Request

    class LSPFRequestQueue(PriorityRequestQueue):
        """Longest cached prefix first, then (priority, arrival)."""

        def __init__(self, cached_blocks: Callable[[Request], int]) -> None:
            super().__init__()
            self._cached_blocks = cached_blocks
            self._shown: Request | None = None

        def _best(self) -> Request:
            if not self._heap:
                raise IndexError("the waiting queue is empty")
            return min(
                self._heap,
                key=lambda r: (-self._cached_blocks(r), r.priority, r.arrival_time),
            )

        def peek_request(self) -> Request:
            self._shown = self._best()
            return self._shown

        def pop_request(self) -> Request:
            request = self._shown if self._shown in self._heap else self._best()
            self._shown = None
            self.remove_request(request)
            return request

        def __iter__(self) -> Iterator[Request]:
            return iter(
                sorted(
                    self._heap,
                    key=lambda r: (-self._cached_blocks(r), r.priority, r.arrival_time),
                )
            )

    class LSPFScheduler(Scheduler):
        """vLLM's scheduler with a longest-shared-prefix-first waiting queue."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            groups = list(range(len(self.kv_cache_config.kv_cache_groups)))
            pool = self.kv_cache_manager.block_pool

            def cached_blocks(request: Request) -> int:
                count = 0
                for block_hash in request.block_hashes:
                    if pool.get_cached_block(block_hash, groups) is None:
                        break
                    count += 1
                return count

            leftover = list(self.waiting)
            self.waiting = LSPFRequestQueue(cached_blocks)
            for request in leftover:
                self.waiting.add_request(request)

    LSPFScheduler.__module__ = __name__
    LSPFScheduler.__qualname__ = "LSPFScheduler"
    return LSPFScheduler


def __getattr__(name: str) -> Any:
    if name == "LSPFScheduler":
        cls = _build()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
