"""Continuous batching with chunked prefill, as vLLM v1's scheduler does it with the
priority policy (``vllm/v1/core/sched/scheduler.py``).

Each step has a budget of ``max_num_batched_tokens`` tokens:

1. Running requests, in admission order, each get their next tokens: one for a decoding
   request, the next prompt chunk (within the remaining budget) for a prefilling one.
   If the pool cannot hold them, the running request with the highest
   (priority, arrival order) is preempted, recompute-style (its blocks are freed, it
   returns to the waiting queue with its original key and is recomputed from scratch
   later), and the allocation is retried; a request that has to preempt itself stops
   this phase.
2. Only if nothing was preempted in this step: waiting requests are admitted lowest
   (priority, arrival order) first while the running count stays under
   ``max_num_seqs``, budget remains and their first chunk fits; a prefix-cache lookup
   at admission skips their cached leading blocks.

:meth:`Scheduler.schedule` plans a step; :meth:`Scheduler.finish_step` applies its
results once the engine has run it: computed tokens advance, a request whose known tokens
are all computed reveals its next output token, finished requests free their blocks
(after pinning them if asked). Requests that can never be scheduled, only possible when
pins hold blocks, are dropped and reported in the plan.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from kalypso.engine.blocks import blocks_for
from kalypso.engine.sim.admission import ADMISSIONS, Growth, fits_at_every_step
from kalypso.engine.sim.kv_cache_manager import KVCacheManager, PrefixHit
from kalypso.engine.sim.request import SimRequest


@dataclass(frozen=True)
class SchedulerConfig:
    """Batch limits (vLLM's ``max_num_seqs`` and ``max_num_batched_tokens``)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    fail_when_pinned_out: bool = False
    """A request that cannot get its blocks even with nothing else running (pins hold
    them): False waits, as vLLM does (the engine then reports waiting requests and none
    running, which is how a deadlock shows); True fails it with EngineError."""
    waiting_order: str = "priority"
    """``"priority"`` (vLLM's: priority, then arrival) or ``"lspf"``: the waiting request
    with the most leading blocks in the prefix cache first (the workflow paper's LSPF
    baseline; :mod:`kalypso.engine.vllm_lspf` does the same on vLLM)."""
    admission: str = "vllm"
    """``"vllm"`` (a request starts when its first chunk fits now) or ``"known-lengths"``:
    it starts only if it and the running requests fit at every future step, their output
    lengths known (:mod:`kalypso.engine.sim.admission`, a what-if for studies)."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError(f"scheduler limits must be >= 1: {self}")
        if self.waiting_order not in ("priority", "lspf"):
            raise ValueError(
                f"waiting_order must be 'priority' or 'lspf', got {self.waiting_order!r}"
            )
        if self.admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, got {self.admission!r}")


@dataclass
class StepPlan:
    """What one step computes.

    Attributes:
        num_scheduled_tokens: request id -> tokens computed for it this step.
        total_tokens: their sum.
        prefill_tokens: scheduled tokens that are not single decode tokens.
        decode_seqs: requests computing the one token that produces their next output.
        preempted: ids of the requests preempted while planning.
        failed: requests dropped because they can never fit, with the reason.
    """

    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    total_tokens: int = 0
    prefill_tokens: int = 0
    decode_seqs: int = 0
    preempted: list[str] = field(default_factory=list)
    failed: list[tuple[SimRequest, str]] = field(default_factory=list)

    def add(self, request_id: str, num_tokens: int) -> None:
        self.num_scheduled_tokens[request_id] = num_tokens
        self.total_tokens += num_tokens

    def remove(self, request_id: str) -> None:
        self.total_tokens -= self.num_scheduled_tokens.pop(request_id, 0)


class Scheduler:
    """Waiting and running requests of one simulated engine; see the module docstring."""

    def __init__(self, kv: KVCacheManager, config: SchedulerConfig) -> None:
        self.kv = kv
        self.config = config
        self.running: list[SimRequest] = []
        self._waiting: list[tuple[int, int, SimRequest]] = []
        self._requests: dict[str, SimRequest] = {}
        self.prefix_cache_queries_tokens = 0
        """Prompt tokens looked up at first admissions (vLLM excludes re-admissions)."""
        self.prefix_cache_hits_tokens = 0
        self.num_preemptions = 0

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def has_work(self) -> bool:
        return bool(self._requests)

    def add_request(self, request: SimRequest) -> None:
        if request.request_id in self._requests:
            raise ValueError(f"request {request.request_id!r} is already in the scheduler")
        self._requests[request.request_id] = request
        heapq.heappush(self._waiting, (*request.admission_key, request))

    def abort(self, request_id: str) -> None:
        """Forget a request (its caller gave up); its blocks are freed unpinned."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return
        if request in self.running:
            self.running.remove(request)
            self.kv.free(request)
        else:
            self._waiting = [entry for entry in self._waiting if entry[2] is not request]
            heapq.heapify(self._waiting)

    def schedule(self, now_s: float) -> StepPlan:
        """Plan one step starting at ``now_s`` (admission times are recorded)."""
        plan = StepPlan()
        self._schedule_running(plan)
        if not plan.preempted:
            self._admit_waiting(plan, now_s)
        self._count_work(plan)
        return plan

    def finish_step(self, plan: StepPlan, now_s: float) -> list[SimRequest]:
        """Apply a step that ended at ``now_s``; return the requests it finished."""
        finished: list[SimRequest] = []
        for request_id, num_tokens in plan.num_scheduled_tokens.items():
            request = self._requests[request_id]
            request.num_computed_tokens += num_tokens
            if request.num_computed_tokens < request.num_tokens:
                continue
            request.append_output_token()
            if request.first_token_s is None:
                request.first_token_s = now_s
            if request.is_finished:
                finished.append(request)
        for request in finished:
            request.finished_s = now_s
            self.running.remove(request)
            del self._requests[request.request_id]
            if request.request.pin_key is not None:
                self.kv.pin(
                    request,
                    request.request.pin_key,
                    max_blocks=request.request.pin_blocks,
                    soft=request.request.pin_soft,
                )
            self.kv.free(request)
        return finished

    def _budget_left(self, plan: StepPlan) -> int:
        return self.config.max_num_batched_tokens - plan.total_tokens

    def _schedule_running(self, plan: StepPlan) -> None:
        while True:
            # invariant: the running requests before this index are the scheduled ones
            index = len(plan.num_scheduled_tokens)
            budget = self._budget_left(plan)
            if index >= len(self.running) or budget <= 0:
                return
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self._allocate_preempting(request, num_new, plan):
                return
            plan.add(request.request_id, num_new)

    def _allocate_preempting(self, request: SimRequest, num_new: int, plan: StepPlan) -> bool:
        """Allocate for a running request, preempting the lowest-priority running request
        (unscheduling it if it was scheduled) until it fits. False when ``request`` itself
        had to go."""
        while self.kv.allocate_slots(request, num_new) is None:
            victim = max(self.running, key=lambda r: r.admission_key)
            if victim is request and len(self.running) == 1:
                if self.config.fail_when_pinned_out:
                    self._fail(request, plan)
                else:
                    self.running.remove(request)
                    plan.remove(request.request_id)
                    self._preempt(request)
                    plan.preempted.append(request.request_id)
                return False
            self.running.remove(victim)
            plan.remove(victim.request_id)
            self._preempt(victim)
            plan.preempted.append(victim.request_id)
            if victim is request:
                return False
        return True

    def _admit_waiting(self, plan: StepPlan, now_s: float) -> None:
        known = self.config.admission == "known-lengths"
        growths = [self._growth(r) for r in self.running] if known else []
        free_blocks = self.kv.pool.num_free_blocks  # before this loop admits anything
        while (
            self._waiting
            and self._budget_left(plan) > 0
            and len(self.running) < self.config.max_num_seqs
        ):
            request = self._next_waiting()
            hit = self.kv.get_computed_blocks(request)
            if known:
                candidate = self._candidate_growth(request, hit)
                fits = fits_at_every_step(
                    growths, candidate, free_blocks, self.kv.block_size_tokens
                )
                if self.running and not fits:
                    return
                growths.append(candidate)
            num_new = min(request.num_tokens - hit.num_tokens, self._budget_left(plan))
            if self.kv.allocate_slots(request, num_new, hit) is None:
                if self.running or not self.config.fail_when_pinned_out:
                    return
                self._pop_waiting(request)
                self._fail(request, plan)
                continue
            self._pop_waiting(request)
            request.num_computed_tokens = hit.num_tokens
            if request.num_cached_tokens is None:
                request.num_cached_tokens = hit.num_tokens
                request.first_scheduled_s = now_s
            if request.num_preemptions == 0:
                self.prefix_cache_queries_tokens += request.num_tokens
                self.prefix_cache_hits_tokens += hit.num_tokens
            self.running.append(request)
            plan.add(request.request_id, num_new)

    def _end_steps(self, request: SimRequest, uncomputed_tokens: int) -> int:
        """Steps from this one until ``request`` has finished: a decoding request reveals
        one token a step; a prompt takes a step per chunk (at most the step's budget) and
        its last chunk reveals the first token."""
        remaining = request.num_remaining_output_tokens
        if uncomputed_tokens <= 1:  # decoding: this step computes its last known token
            return remaining
        return blocks_for(uncomputed_tokens, self.config.max_num_batched_tokens) + remaining - 1

    def _growth(self, request: SimRequest) -> Growth:
        """A running request's future blocks, its output length known (this step's are
        allocated already)."""
        held = self.kv.blocks_of(request.request_id)
        return Growth(
            tokens=request.num_tokens,
            held_blocks=len(held),
            remaining_tokens=request.num_remaining_output_tokens,
            end_steps=self._end_steps(request, request.num_tokens - request.num_computed_tokens),
            freed_blocks=sum(1 for block in held if block.ref_count == 1),
        )

    def _candidate_growth(self, request: SimRequest, hit: PrefixHit) -> Growth:
        """A waiting request's future blocks if it started now: its cached blocks that
        others reference cost nothing, the rest come from the free blocks."""
        return Growth(
            tokens=request.num_tokens,
            held_blocks=sum(1 for block in hit.blocks if block.ref_count > 0),
            remaining_tokens=request.num_remaining_output_tokens,
            end_steps=self._end_steps(request, request.num_tokens - hit.num_tokens),
            freed_blocks=0,
        )

    def _next_waiting(self) -> SimRequest:
        if self.config.waiting_order == "priority":
            return self._waiting[0][2]
        best = min(
            self._waiting,
            key=lambda e: (-self.kv.get_computed_blocks(e[2]).num_tokens, e[0], e[1]),
        )
        return best[2]

    def _pop_waiting(self, request: SimRequest) -> None:
        if self._waiting[0][2] is request:
            heapq.heappop(self._waiting)
            return
        self._waiting = [entry for entry in self._waiting if entry[2] is not request]
        heapq.heapify(self._waiting)

    def _preempt(self, request: SimRequest) -> None:
        self.kv.free(request)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        heapq.heappush(self._waiting, (*request.admission_key, request))

    def _fail(self, request: SimRequest, plan: StepPlan) -> None:
        """Drop a request that cannot get its blocks even with no other request running."""
        if request in self.running:
            self.running.remove(request)
        self.kv.free(request)
        del self._requests[request.request_id]
        pool = self.kv.pool
        plan.failed.append(
            (
                request,
                f"request {request.request_id!r} ({request.num_tokens} tokens so far) cannot"
                f" get its KV blocks even with no other request running: {pool.num_pinned_blocks}"
                f" of the {pool.num_blocks} blocks are pinned; unpin some",
            )
        )

    def _count_work(self, plan: StepPlan) -> None:
        for request_id, num_tokens in plan.num_scheduled_tokens.items():
            request = self._requests[request_id]
            decoding = (
                request.num_output_tokens > 0
                and request.num_computed_tokens == request.num_tokens - 1
            )
            if decoding:
                plan.decode_seqs += 1
            else:
                plan.prefill_tokens += num_tokens
