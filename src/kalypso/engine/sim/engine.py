"""The simulated engine: vLLM v1's paged prefix cache and scheduler on a virtual clock.

:class:`SimEngine` implements :class:`kalypso.engine.protocol.Engine`. ``generate``
queues a request and awaits its result; a step loop (an asyncio task started by the first
``generate``, stopped by ``close``) runs one engine step at a time:

1. it first yields to the event loop ``yields_per_step`` times, so that callers that were
   just handed a result can submit their next request before the step is planned (in
   asyncio this is deterministic: the same program produces the same batches);
2. it plans the step (:class:`~kalypso.engine.sim.scheduler.Scheduler`), advances the
   virtual clock by the profile's step cost, applies the step and resolves the futures
   of finished requests.

When there is nothing to do the loop waits on an event. The engine never sleeps on wall
time: a step costs only the Python work to simulate it. All times it reports (request
timings, :attr:`SimEngine.now_s`, the per-phase totals of :meth:`SimEngine.stats`) are
virtual seconds since the engine was created.

Work the caller runs off the event loop (a Python step in a thread: an index lookup, a
blocking function) takes no virtual time: while any is held with :meth:`SimEngine.host_work`,
the step loop does not step. A real engine keeps stepping beside such work, but its steps
are milliseconds of wall time there, against about a tenth of a millisecond here, so the
simulator would otherwise charge each thread's wall time as hundreds of nearly empty
steps, and virtual times would depend on the host's speed.

Timeouts are the exception: ``GenerateRequest.timeout_s`` (else the engine's
``default_timeout_s``) counts *wall-clock* seconds, because the virtual clock stands still
while nothing can run (a request pins keep out, a stalled step loop), which is exactly when
a timeout must fire. A request that times out is aborted in the scheduler (its blocks are
freed, unpinned) and its caller gets :class:`EngineTimeoutError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterator

from kalypso.engine.blocks import blocks_for
from kalypso.engine.cost_model import CostModel
from kalypso.engine.protocol import (
    EngineCapacity,
    EngineDeadError,
    EngineError,
    EngineStats,
    EngineTimeoutError,
    GenerateRequest,
    GenerateResult,
    RequestTimings,
    Tokenizer,
    check_fits_context,
)
from kalypso.engine.sim.block_pool import BlockPool, KVEventSink
from kalypso.engine.sim.clock import SharedClock
from kalypso.engine.sim.costs import CostProfile, get_profile
from kalypso.engine.sim.kv_cache_manager import KVCacheManager
from kalypso.engine.sim.outputs import SimCompletion, SimOutputModel
from kalypso.engine.sim.request import SimRequest
from kalypso.engine.sim.scheduler import Scheduler, SchedulerConfig
from kalypso.engine.sim.tokenizer import WordTokenizer

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
"""Wall-clock seconds a request may wait for its result when it sets no ``timeout_s``."""


class SimEngine:
    """A deterministic simulated engine with a paged LRU prefix cache.

    Args:
        profile: a registered profile name or a :class:`CostProfile`; gives the step
            costs and the default capacity.
        num_blocks: KV blocks (default: the profile's).
        block_size_tokens: tokens per block (default: the profile's).
        max_model_len_tokens: longest prompt + output. Default: the profile's, capped to
            the pool's tokens (vLLM refuses to start otherwise). A larger value may be
            given; a request that could outgrow the pool is then rejected.
        max_num_seqs: most requests running at once.
        max_num_batched_tokens: tokens computed per step (chunked prefill).
        fail_when_pinned_out: fail (rather than keep waiting) a request that pins keep out.
        outputs: the output model (default: ``SimOutputModel()``).
        tokenizer: any tokenizer (default: a :class:`WordTokenizer`).
        on_kv_event: called with every KV cache event (``BlockStored``,
            ``BlockRemoved``, ``AllBlocksCleared``) as it happens.
        yields_per_step: event-loop turns given to callers before each step.
        waiting_order: ``"priority"`` (vLLM's default order) or ``"lspf"`` (longest cached
            prefix first, the workflow paper's LSPF baseline).
        admission: ``"vllm"`` (vLLM's) or ``"known-lengths"``: a what-if engine that knows
            each output's length and never admits what it would have to preempt
            (:mod:`kalypso.engine.sim.admission`).
        default_timeout_s: wall-clock seconds a request may take when it sets no
            ``timeout_s`` (see the module docstring).
        wall_s_per_virtual_s: when above 0, each step also takes this many wall-clock
            seconds per virtual second it costs (1.0: real time). A paced simulator is an
            engine whose steps, not the caller's Python, set the pace, as a GPU's do: for
            tests of several runs sharing an engine on wall-clock time (the job server).
            0 (the default): no waiting, steps cost only their Python work.
        clock: a :class:`~kalypso.engine.sim.clock.SharedClock` shared with other
            simulated engines (replicas): the engines then take their steps in one
            virtual time (see :mod:`kalypso.engine.sim.clock`).
        continuations: the outputs cut at ``max_tokens`` so far (see :meth:`_complete`);
            pass one dict to replicas of one model, so a call continued on another
            replica goes on with the same output, as on a real model.

    Attributes:
        block_pool: the KV block pool, for inspection (hashes, free queue, pins).
        num_steps: steps that computed something.
        busy_s: virtual seconds of those steps (``now_s`` less the time idle).

    A request with a ``pin_key`` keeps its full (cached) blocks referenced after it
    finishes (the first ``pin_blocks`` of them, when set), until ``unpin(pin_key)``, or
    with ``pin_soft`` until a request cannot get its blocks beside them. A request that
    cannot be admitted beside the hard-pinned blocks waits, as in vLLM (stats then show
    waiting requests and none running: a deadlock the caller must break by unpinning);
    with ``fail_when_pinned_out`` it fails with :class:`EngineError` instead.
    """

    def __init__(
        self,
        profile: str | CostProfile = "smollm2-cpu",
        *,
        num_blocks: int | None = None,
        block_size_tokens: int | None = None,
        max_model_len_tokens: int | None = None,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
        fail_when_pinned_out: bool = False,
        outputs: SimOutputModel | None = None,
        tokenizer: Tokenizer | None = None,
        on_kv_event: KVEventSink | None = None,
        yields_per_step: int = 8,
        waiting_order: str = "priority",
        admission: str = "vllm",
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        wall_s_per_virtual_s: float = 0.0,
        clock: SharedClock | None = None,
        continuations: dict[int, tuple[tuple[int, ...], int]] | None = None,
    ) -> None:
        if not default_timeout_s > 0:
            raise ValueError(f"default_timeout_s must be > 0, got {default_timeout_s}")
        if not 0 <= wall_s_per_virtual_s < float("inf"):
            raise ValueError(f"wall_s_per_virtual_s must be >= 0, got {wall_s_per_virtual_s}")
        self._wall_s_per_virtual_s = wall_s_per_virtual_s
        self._profile = get_profile(profile) if isinstance(profile, str) else profile
        default = self._profile.capacity
        num_blocks = default.num_blocks if num_blocks is None else num_blocks
        if block_size_tokens is None:
            block_size_tokens = default.block_size_tokens
        if max_model_len_tokens is None:
            max_model_len_tokens = min(default.max_model_len_tokens, num_blocks * block_size_tokens)
        self._capacity = EngineCapacity(
            num_blocks, block_size_tokens, max_model_len_tokens, max_running_requests=max_num_seqs
        )
        self._tokenizer: Tokenizer = tokenizer if tokenizer is not None else WordTokenizer()
        self._outputs = outputs if outputs is not None else SimOutputModel()
        self.block_pool = BlockPool(self._capacity.num_blocks, on_event=on_kv_event)
        self._scheduler = Scheduler(
            KVCacheManager(self.block_pool, self._capacity.block_size_tokens),
            SchedulerConfig(
                max_num_seqs,
                max_num_batched_tokens,
                fail_when_pinned_out,
                waiting_order,
                admission,
            ),
        )
        self._cost_model = self._profile.cost_model(max_num_batched_tokens, max_num_seqs)
        self._yields_per_step = yields_per_step
        self._default_timeout_s = default_timeout_s
        self._prefill_time_s = 0.0
        self._decode_time_s = 0.0
        self._futures: dict[str, asyncio.Future[GenerateResult]] = {}
        self._cut: dict[int, tuple[tuple[int, ...], int]] = (
            continuations if continuations is not None else {}
        )
        """Outputs stopped at max_tokens: hash of prompt + output -> (the first prompt,
        tokens generated so far), so a continuation goes on with the same output."""
        self._arrivals = itertools.count()
        self._now_s = 0.0
        self.num_steps = 0
        self.busy_s = 0.0
        self._wake: asyncio.Event | None = None
        self._host_work = 0
        """Callers' threads running now (:meth:`host_work`): no step while any runs."""
        self._loop_task: asyncio.Task[None] | None = None
        self._closed_reason: str | None = None
        self._clock = clock
        self._stalled = False
        """With a shared clock: the last step scheduled nothing (pins hold the room); the
        engine gives up its turn until a request comes, goes or is unpinned."""
        if clock is not None:
            clock.join(self)

    @property
    def name(self) -> str:
        return f"sim:{self._profile.name}"

    @property
    def profile(self) -> CostProfile:
        return self._profile

    @property
    def capacity(self) -> EngineCapacity:
        return self._capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def supports_pinning(self) -> bool:
        return True

    @property
    def cost_model(self) -> CostModel:
        """The profile's step costs with this engine's batch limits: exactly what its
        virtual clock charges."""
        return self._cost_model

    @property
    def now_s(self) -> float:
        """The virtual clock: seconds of simulated engine time since creation."""
        return self._now_s

    @property
    def num_evicted_blocks(self) -> int:
        """Cached blocks evicted so far to make room."""
        return self.block_pool.num_evicted_blocks

    @property
    def num_preemptions(self) -> int:
        """Running requests preempted so far (freed, to be recomputed)."""
        return self._scheduler.num_preemptions

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Run one request to completion on the simulated engine.

        Raises:
            PromptTooLongError: prompt + ``max_tokens`` exceeds the context.
            EngineTimeoutError: no result within ``timeout_s`` wall-clock seconds (or the
                engine default); the request was aborted in the scheduler.
            EngineError: the request could never fit the KV pool, its id is already in
                flight, or the engine is (or gets) closed.
        """
        if self._closed_reason is not None:
            raise EngineDeadError(f"request {request.request_id!r}: {self._closed_reason}")
        check_fits_context(request, self._capacity)
        prompt_len = len(request.prompt_token_ids)
        needed_blocks = blocks_for(
            prompt_len + request.max_tokens - 1, self._capacity.block_size_tokens
        )
        if needed_blocks > self._capacity.num_blocks:
            raise EngineError(
                f"request {request.request_id!r}: a prompt of {prompt_len} tokens plus"
                f" max_tokens={request.max_tokens} needs {needed_blocks} KV blocks of"
                f" {self._capacity.block_size_tokens} tokens, more than the whole pool of"
                f" {self._capacity.num_blocks}"
            )
        if request.request_id in self._futures:
            raise EngineError(f"request id {request.request_id!r} is already in flight")
        completion = self._complete(request)
        if self._clock is not None and not self._scheduler.has_work:
            self._now_s = max(self._now_s, self._clock.now_s)  # idle until now
        future: asyncio.Future[GenerateResult] = asyncio.get_running_loop().create_future()
        self._futures[request.request_id] = future
        self._scheduler.add_request(
            SimRequest(
                request=request,
                arrival_seq=next(self._arrivals),
                arrival_s=self._now_s,
                completion=completion,
                block_size_tokens=self._capacity.block_size_tokens,
            )
        )
        self._wake_loop()
        timeout_s = request.timeout_s or self._default_timeout_s
        logger.debug(
            "request %r queued: %d prompt tokens, max_tokens=%d, priority %d",
            request.request_id,
            prompt_len,
            request.max_tokens,
            request.priority,
        )
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            self._abort(request.request_id, future)
            logger.debug("request %r timed out after %.3f s", request.request_id, timeout_s)
            raise EngineTimeoutError(
                f"request {request.request_id!r} did not finish within {timeout_s} s"
                " (wall clock); it was aborted in the simulated engine"
            ) from None
        except asyncio.CancelledError:
            self._abort(request.request_id, future)
            raise

    def _abort(self, request_id: str, future: asyncio.Future[GenerateResult]) -> None:
        """Forget a request its caller gave up on; its blocks are freed, unpinned."""
        if self._futures.get(request_id) is future:
            del self._futures[request_id]
            self._scheduler.abort(request_id)
            self._stalled = False  # its blocks are free
            if self._clock is not None:
                self._clock.changed()

    def _complete(self, request: GenerateRequest) -> SimCompletion:
        """The simulated model's output. A request whose prompt is an earlier request's
        prompt plus the tokens it generated before stopping at ``max_tokens`` continues
        that output, as a real model decoding greedily would: the two outputs together
        are the one an uninterrupted request would have given."""
        origin = self._cut.get(hash(request.prompt_token_ids))
        prompt, skip = origin if origin is not None else (request.prompt_token_ids, 0)
        completion = self._outputs.complete(
            prompt,
            max_tokens=skip + request.max_tokens,
            tokenizer=self._tokenizer,
            ignore_eos=request.ignore_eos,
            stop=request.stop,
            allowed_token_ids=request.allowed_token_ids,
            logprobs=request.logprobs,
        )
        if skip:
            tokens = completion.token_ids[skip:]
            eos = self._tokenizer.eos_token_id
            text = self._tokenizer.decode([t for t in tokens if t != eos])
            logprobs = completion.logprobs[skip:] if completion.logprobs else ()
            completion = SimCompletion(tokens, text, completion.finish_reason, logprobs)
        if completion.finish_reason == "length" and request.allowed_token_ids is None:
            generated = skip + len(completion.token_ids)
            self._cut[hash(request.prompt_token_ids + completion.token_ids)] = (prompt, generated)
        return completion

    @property
    def host_work_held(self) -> int:
        """Callers' work off the event loop running now (:meth:`host_work`)."""
        return self._host_work

    @contextlib.contextmanager
    def host_work(self) -> Iterator[None]:
        """Hold the virtual clock while the caller runs work off the event loop (see the
        module docstring); the step loop goes on when the last such work ends."""
        self._host_work += 1
        try:
            yield
        finally:
            self._host_work -= 1
            if self._host_work == 0 and self._wake is not None:
                self._wake.set()
            if self._clock is not None:
                self._clock.changed()

    @property
    def wants_step(self) -> bool:
        """Whether the engine has work it could schedule now (what a shared clock asks)."""
        return self._scheduler.has_work and not self._host_work and not self._stalled

    async def stats(self) -> EngineStats:
        """Scheduler and cache counters; ``prefill_time_s`` and ``decode_time_s`` are sums
        over finished requests of their virtual prefill (first scheduled to first token)
        and decode (first token to finish) times, as vLLM's histograms sum them."""
        return EngineStats(
            running_requests=len(self._scheduler.running),
            waiting_requests=self._scheduler.num_waiting,
            prefix_cache_queries_tokens=self._scheduler.prefix_cache_queries_tokens,
            prefix_cache_hits_tokens=self._scheduler.prefix_cache_hits_tokens,
            kv_usage_fraction=self.block_pool.num_used_blocks / self.block_pool.num_blocks,
            prefill_time_s=self._prefill_time_s,
            decode_time_s=self._decode_time_s,
            preemptions=self._scheduler.num_preemptions,
        )

    async def reset_prefix_cache(self) -> None:
        """Drop the cached hashes of every block no request or pin holds."""
        self.block_pool.reset_prefix_cache()

    async def unpin(self, pin_key: str) -> None:
        """Release the blocks pinned under ``pin_key`` (no-op if none)."""
        self.block_pool.unpin(pin_key)
        self._wake_loop()

    async def unpin_all(self) -> None:
        """Release every pin (deadlock recovery)."""
        for pin_key in self.block_pool.pin_keys():
            self.block_pool.unpin(pin_key)
        self._wake_loop()

    async def stalled_requests(self) -> int:
        """Requests waiting while none runs (exact: the virtual clock stands still between
        steps)."""
        return 0 if self._scheduler.running else self._scheduler.num_waiting

    async def close(self) -> None:
        """Stop the step loop and fail every pending request with EngineError."""
        if self._closed_reason is not None:
            return
        self._closed_reason = "the simulated engine is closed"
        logger.info("%s closed at virtual %.3f s", self.name, self._now_s)
        if self._clock is not None:
            self._clock.leave(self)
        await self._stop_loop()
        self._fail_pending(self._closed_reason)

    def _wake_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            # (a finished task: the event loop it ran on was closed, e.g. by asyncio.run)
            self._wake = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())
        assert self._wake is not None
        self._wake.set()
        self._stalled = False
        if self._clock is not None:
            self._clock.changed()

    async def _stop_loop(self) -> None:
        task, self._loop_task = self._loop_task, None
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        assert self._wake is not None
        try:
            while True:
                if not self._scheduler.has_work or self._host_work or self._stalled:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                for _ in range(self._yields_per_step):
                    await asyncio.sleep(0)
                if self._clock is not None:
                    await self._clock.turn(self)
                    if not self.wants_step:
                        continue
                before_s = self._now_s
                self._step()
                if self._clock is not None:
                    self._stalled = self._now_s == before_s
                    self._clock.stepped(self._now_s)
                if self._wall_s_per_virtual_s:
                    await asyncio.sleep((self._now_s - before_s) * self._wall_s_per_virtual_s)
        except Exception as exc:  # a bug in the simulator: no caller may hang on it
            logger.exception("the simulated engine's step loop failed")
            self._closed_reason = f"the simulated engine failed: {exc!r}"
            self._fail_pending(self._closed_reason)

    def _step(self) -> None:
        plan = self._scheduler.schedule(self._now_s)
        for request, reason in plan.failed:
            self._set_exception(request.request_id, EngineError(reason))
        if not plan.num_scheduled_tokens:
            return
        step_s = self._cost_model.step_time_s(plan.prefill_tokens, plan.decode_seqs)
        self._now_s += step_s
        self.busy_s += step_s
        self.num_steps += 1
        for request in self._scheduler.finish_step(plan, self._now_s):
            result = self._result(request)
            self._prefill_time_s += result.timings.prefill_s
            self._decode_time_s += result.timings.decode_s
            future = self._futures.pop(request.request_id)
            if not future.done():
                future.set_result(result)

    def _result(self, request: SimRequest) -> GenerateResult:
        assert request.first_scheduled_s is not None and request.first_token_s is not None
        assert request.finished_s is not None and request.num_cached_tokens is not None
        completion = request.completion
        return GenerateResult(
            request_id=request.request_id,
            output_token_ids=completion.token_ids,
            text=completion.text,
            finish_reason=completion.finish_reason,
            prompt_tokens=request.num_prompt_tokens,
            cached_tokens=request.num_cached_tokens,
            timings=RequestTimings(
                queued_s=request.first_scheduled_s - request.arrival_s,
                first_token_s=request.first_token_s - request.arrival_s,
                total_s=request.finished_s - request.arrival_s,
                scheduled_at_s=request.first_scheduled_s,
            ),
            logprobs=completion.logprobs,
            token_logprobs=tuple(
                dict(position).get(token, float("-inf"))
                for token, position in zip(completion.token_ids, completion.logprobs, strict=False)
            ),
        )

    def _set_exception(self, request_id: str, error: EngineError) -> None:
        future = self._futures.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def _fail_pending(self, reason: str) -> None:
        for request_id in list(self._futures):
            self._set_exception(request_id, EngineDeadError(f"request {request_id!r}: {reason}"))
