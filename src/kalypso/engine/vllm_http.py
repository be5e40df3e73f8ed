"""A running vLLM OpenAI-compatible server, reached over HTTP, behind the engine protocol.

* requests: ``POST /v1/completions`` with the prompt as token ids, ``priority`` and
  ``return_token_ids``; cached tokens come from ``usage.prompt_tokens_details`` (the
  server must run with ``--enable-prompt-tokens-details``; ``kalypso engine serve`` does);
* constrained decoding and logprobs: ``allowed_token_ids``, ``logprobs: N`` and
  ``return_tokens_as_token_ids: true``, so ``choices[0].logprobs.top_logprobs`` is one
  ``{"token_id:<id>": logprob}`` per generated position. The server must run with
  ``--logprobs-mode processed_logprobs`` (``VLLMServer`` passes it) for logprobs under
  ``allowed_token_ids`` to be renormalised over the allowed ids;
* capacity: the ``vllm:cache_config_info`` gauge of ``/metrics`` (``num_gpu_blocks``
  less vLLM's null block, over the model's KV cache groups when its folder is local;
  ``block_size``) and ``max_model_len`` from ``/v1/models``;
* live stats: the ``/metrics`` counters and gauges; per-phase time from the sums of the
  ``vllm:request_prefill_time_seconds`` and ``vllm:request_decode_time_seconds``
  histograms;
* tokenizer: always local. vLLM's ``/tokenize`` cannot split special tokens (it has no
  ``split_special_tokens`` option in vLLM 0.32), so data could forge control tokens
  through it. :meth:`HTTPVLLMEngine.connect` loads the model's tokenizer from the
  server's model folder when that folder is on this machine, or from an explicit
  ``tokenizer=`` path (or takes a :class:`~kalypso.engine.protocol.Tokenizer`), and
  fails with :class:`EngineError` otherwise;
* transient failures: connection errors (nothing was sent) and HTTP 429/502/503/504 are
  retried with exponential backoff by ``httpx-retries`` (:data:`DEFAULT_RETRY`: at most 3
  retries, sleeps capped); then the call fails with :class:`EngineError` naming the URL;
* timeouts: each call runs under ``asyncio.timeout`` (the request's ``timeout_s``, else
  the engine's ``default_timeout_s``), retries included. On expiry the HTTP request is
  cancelled, which closes its connection; vLLM's server notices the disconnect and aborts
  the request in its engine. :class:`EngineTimeoutError` is raised;
* explicit pinning, when the server runs Kalypso's pinning scheduler
  (``--scheduler-cls kalypso.engine.vllm_pinning.PinningScheduler``, which
  ``VLLMServer.start(VLLMSettings(scheduler_cls=PINNING_SCHEDULER_CLS))`` passes) and the
  client says so (``connect(url, pinning=True)``, checked at connect): the pin key and the
  control requests of :meth:`HTTPVLLMEngine.unpin` and :meth:`HTTPVLLMEngine.unpin_all`
  travel in the completions body's ``vllm_xargs``. Each completion carries a
  ``request_id`` (the server names it ``cmpl-<id>-0``), so a timed-out pinned request can
  be cancelled in the scheduler (``kalypso_cancel``) and pins nothing;
* prefix-cache reset needs the server's admin endpoints (``VLLM_SERVER_DEV_MODE=1``:
  ``kalypso engine serve --admin-endpoints``, ``VLLMServer.start(...,
  admin_endpoints=True)``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from httpx_retries import Retry, RetryTransport
from prometheus_client.parser import text_string_to_metric_families

from kalypso.engine.calibration import measured_cost_model
from kalypso.engine.cost_fit import OnlineCostFit, StepSample
from kalypso.engine.cost_model import CostModel
from kalypso.engine.hf_tokenizer import load_hf_tokenizer
from kalypso.engine.host import describe_host
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
    PING_ARG,
    PINNING_SCHEDULER_CLS,
    STALLED_ARG,
    UNPIN_ALL_ARG,
    UNPIN_ARG,
    parse_control_stop_reason,
    pin_extra_args,
)
from kalypso.engine.vllm_settings import DEFAULT_TIMEOUT_S, kv_cache_groups, usable_blocks

logger = logging.getLogger(__name__)

RETRY_STATUS_CODES = (429, 502, 503, 504)
"""Statuses retried: too many requests, and a gateway or server that is not ready."""

DEFAULT_RETRY = Retry(
    total=3,
    allowed_methods=["GET", "POST"],
    status_forcelist=RETRY_STATUS_CODES,
    retry_on_exceptions=[httpx.ConnectError, httpx.ConnectTimeout],
    backoff_factor=0.25,
    max_backoff_wait=4.0,
    total_timeout=8.0,
)
"""Retry policy of :class:`HTTPVLLMEngine`: connection failures (the request was never
sent, so retrying a POST is safe) and 429/502/503/504, at most 3 retries, exponential
backoff (0.5 s, 1 s, 2 s, with full jitter), at most 8 s of sleep in all. A read timeout or
a connection dropped mid-request is not retried (the server may have run the request)."""

CONTROL_TIMEOUT_S = 30.0
"""Bound on a pinning control request sent while cleaning up after a timeout."""
METRICS_TIMEOUT_S = 30.0
"""Bound on a ``/v1/models`` or ``/metrics`` call, retries included."""


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text into {sample name: [(labels, value), ...]}."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def _metric_sum(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, []))


def parse_top_logprobs(
    top_logprobs: list[dict[str, float] | None] | None, limit: int
) -> tuple[tuple[tuple[int, float], ...], ...]:
    """The completions API's ``top_logprobs`` (with ``return_tokens_as_token_ids``: keys
    ``"token_id:<id>"``) as per-position ``(id, logprob)`` pairs, most likely first (ties
    by id), at most ``limit`` per position.

    Raises:
        EngineError: a key is not of the ``token_id:<id>`` form.
    """
    table: list[tuple[tuple[int, float], ...]] = []
    for position in top_logprobs or []:
        pairs: list[tuple[int, float]] = []
        for key, logprob in (position or {}).items():
            prefix, _, number = key.partition(":")
            if prefix != "token_id" or not number.lstrip("-").isdigit():
                raise EngineError(
                    f"logprob key {key!r} is not 'token_id:<id>'; was the request sent with"
                    " return_tokens_as_token_ids?"
                )
            pairs.append((int(number), float(logprob)))
        table.append(tuple(sorted(pairs, key=lambda pair: (-pair[1], pair[0]))[:limit]))
    return tuple(table)


def _local_tokenizer(
    base_url: str, root: str, tokenizer: str | Path | Tokenizer | None
) -> Tokenizer:
    if tokenizer is not None and not isinstance(tokenizer, str | Path):
        return tokenizer
    if tokenizer is not None:
        return load_hf_tokenizer(str(tokenizer))
    if root and (Path(root) / "tokenizer.json").is_file():
        return load_hf_tokenizer(root)
    raise EngineError(
        f"{base_url} serves a model from {root or 'an unknown place'!r}, which is not a"
        " model folder on this machine; pass tokenizer=<local folder or Hugging Face id of"
        " the same model> to HTTPVLLMEngine.connect (the server's /tokenize cannot keep"
        " special-token strings in data from becoming control tokens)"
    )


@dataclass(frozen=True)
class _StepCounters:
    """A scrape's cumulative step counters: steps run (the count of vLLM's
    per-iteration token histogram), prompt tokens computed, tokens generated, and
    whether anything was running or waiting."""

    at_s: float
    steps: float
    prefill_tokens: float
    decode_tokens: float
    busy: bool

    @classmethod
    def of(cls, samples: dict[str, list[tuple[dict[str, str], float]]]) -> _StepCounters | None:
        if "vllm:iteration_tokens_total_count" not in samples:
            return None
        computed = [
            value
            for labels, value in samples.get("vllm:prompt_tokens_by_source_total", [])
            if labels.get("source") == "local_compute"
        ]
        busy = _metric_sum(samples, "vllm:num_requests_running") + _metric_sum(
            samples, "vllm:num_requests_waiting"
        )
        return cls(
            time.monotonic(),
            _metric_sum(samples, "vllm:iteration_tokens_total_count"),
            sum(computed),
            _metric_sum(samples, "vllm:generation_tokens_total"),
            busy > 0,
        )


class HTTPVLLMEngine:
    """Talks to one vLLM server. Create with ``await HTTPVLLMEngine.connect(url)``."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        capacity: EngineCapacity,
        tokenizer: Tokenizer,
        pinning: bool = False,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._client = client
        self._base_url = base_url
        self._model = model
        self._capacity = capacity
        self._tokenizer = tokenizer
        self._pinning = pinning
        self._default_timeout_s = default_timeout_s
        self._closed = False
        self._costs: OnlineCostFit | None = None
        self._last_steps: _StepCounters | None = None

    @classmethod
    async def connect(
        cls,
        base_url: str,
        model: str | None = None,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        pinning: bool = False,
        tokenizer: str | Path | Tokenizer | None = None,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_running_requests: int | None = None,
        max_step_tokens: int | None = None,
        cost_model: CostModel | None = None,
        calibrate: bool = True,
        calibration_key: Mapping[str, object] | None = None,
    ) -> HTTPVLLMEngine:
        """Connect to the server at ``base_url`` (for example ``http://127.0.0.1:8000``).

        Args:
            model: the served model name; default: the only model the server serves.
            default_timeout_s: seconds a call may take when the request sets no
                ``timeout_s``.
            pinning: use explicit pinning; the server must run Kalypso's pinning
                scheduler, which is checked here with one control request (answered
                without running the model). When false (the default) nothing is sent,
                and pin keys are rejected with ``UnsupportedFeatureError``.
            tokenizer: a local tokenizer folder (or Hugging Face id) of the served model,
                or a :class:`Tokenizer`; default: the server's model folder, which must
                then be on this machine.
            retry: the retry policy (default :data:`DEFAULT_RETRY`).
            transport: the transport under the retries (default: httpx's; tests pass an
                ``httpx.MockTransport``).
            max_running_requests: the server's ``max_num_seqs``, when the caller knows it
                (vLLM's metrics do not report it); it becomes
                ``capacity.max_running_requests``.
            max_step_tokens: the server's ``max_num_batched_tokens``, when the caller
                knows it (for the cost model's predictions; the metrics do not report it).
            cost_model: what a step costs on the server; None: measured now by a short
                calibration, or read from the one kept on disk under ``calibration_key``
                (default: the URL, the model, the block size and this host).
            calibrate: False: no calibration when no model is given (no cost model).
            calibration_key: what the measured model depends on (a server this process
                started passes its settings: :func:`~kalypso.engine.vllm_settings.calibration_key`).

        Raises:
            EngineError: the server is unreachable (naming the URL), serves no model of
                that name (naming the served ones), lacks the metrics Kalypso needs, its
                tokenizer is not available locally, or (with ``pinning=True``) it does
                not run the pinning scheduler.
        """
        if not default_timeout_s > 0:
            raise ValueError(f"default_timeout_s must be > 0, got {default_timeout_s}")
        if max_running_requests is not None and max_running_requests < 1:
            raise ValueError(f"max_running_requests must be >= 1, got {max_running_requests}")
        base_url = base_url.rstrip("/").removesuffix("/v1")
        client = httpx.AsyncClient(
            base_url=base_url,
            transport=RetryTransport(transport=transport, retry=retry or DEFAULT_RETRY)
            if transport is not None
            else RetryTransport(retry=retry or DEFAULT_RETRY),
            # the per-call deadline is asyncio's; httpx only bounds connecting
            timeout=httpx.Timeout(None, connect=10.0),
        )
        try:
            models = await cls._served_models(client, base_url)
            served = [m["id"] for m in models]
            if model is None:
                if len(served) != 1:
                    raise EngineError(f"{base_url} serves {served}; name one with model=")
                model = served[0]
            if model not in served:
                raise EngineError(f"{base_url} does not serve model {model!r}; it serves {served}")
            card = next(m for m in models if m["id"] == model)
            root = str(card.get("root") or "")  # the model's folder, if local
            capacity = await cls._read_capacity(
                client, base_url, int(card.get("max_model_len") or 0), kv_cache_groups(root)
            )
            capacity = replace(capacity, max_running_requests=max_running_requests)
            local = _local_tokenizer(base_url, root, tokenizer)
            engine = cls(client, base_url, model, capacity, local, pinning, default_timeout_s)
            if pinning:
                await engine._control({PING_ARG: 1})
            if cost_model is None and calibrate:
                key = calibration_key or {
                    "engine": "vllm-http",
                    "server": httpx.URL(base_url).host,  # not the port: it changes
                    "model": model,
                    "block_size": capacity.block_size_tokens,
                    "blocks": capacity.num_blocks,
                    "context": capacity.max_model_len_tokens,
                    "host": describe_host(),
                }
                cost_model = await measured_cost_model(engine, key)
            if cost_model is not None:
                limited = cost_model.with_limits(max_step_tokens, max_running_requests)
                engine._costs = OnlineCostFit(limited)
        except BaseException:
            await client.aclose()
            raise
        logger.info(
            "connected to %s (model %r, %d KV blocks of %d tokens, pinning %s)",
            base_url,
            model,
            capacity.num_blocks,
            capacity.block_size_tokens,
            "on" if pinning else "off",
        )
        return engine

    @staticmethod
    async def _served_models(client: httpx.AsyncClient, base_url: str) -> list[dict[str, Any]]:
        try:
            async with asyncio.timeout(METRICS_TIMEOUT_S):
                response = await client.get("/v1/models")
        except (httpx.HTTPError, TimeoutError) as exc:
            raise EngineError(
                f"cannot reach a vLLM server at {base_url} (connection failures were"
                f" retried): {exc!r}"
            ) from exc
        if response.status_code != 200:
            raise EngineError(f"{base_url}/v1/models answered HTTP {response.status_code}")
        return list(response.json().get("data", []))

    @staticmethod
    async def _read_capacity(
        client: httpx.AsyncClient, base_url: str, max_model_len: int, kv_groups: int = 1
    ) -> EngineCapacity:
        """The capacity the metrics report, in blocks a request can hold (``kv_groups``:
        see :func:`~kalypso.engine.vllm_settings.usable_blocks`)."""
        try:
            async with asyncio.timeout(METRICS_TIMEOUT_S):
                response = await client.get("/metrics")
        except (httpx.HTTPError, TimeoutError) as exc:
            raise EngineError(f"cannot read {base_url}/metrics: {exc!r}") from exc
        samples = parse_metrics(response.text)
        info = samples.get("vllm:cache_config_info")
        if not info:
            raise EngineError(f"{base_url}/metrics has no vllm:cache_config_info gauge")
        labels = info[0][0]
        return EngineCapacity(
            num_blocks=usable_blocks(int(labels["num_gpu_blocks"]), kv_groups),
            block_size_tokens=int(labels["block_size"]),
            max_model_len_tokens=max_model_len,
        )

    async def __aenter__(self) -> HTTPVLLMEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def name(self) -> str:
        return f"vllm-http:{self._model}@{self._base_url}"

    @property
    def base_url(self) -> str:
        """The server's address, without ``/v1``."""
        return self._base_url

    @property
    def capacity(self) -> EngineCapacity:
        return self._capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def supports_pinning(self) -> bool:
        """True when connected with ``pinning=True`` (the server's scheduler was checked)."""
        return self._pinning

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Run one request to completion on the server.

        Raises:
            PromptTooLongError: prompt + ``max_tokens`` exceeds the context.
            UnsupportedFeatureError: a pin key without ``pinning=True``.
            EngineTimeoutError: no answer within ``timeout_s`` (else the engine's default);
                the connection was closed, so the server aborted the request.
            RequestAbortedError: the server aborted the request.
            EngineError: the server failed, refused the request, or could not be reached
                after the retries (the message names the URL).
        """
        self._check_open()
        check_fits_context(request, self._capacity)
        if request.pin_key is not None and not self._pinning:
            raise UnsupportedFeatureError(
                f"request {request.request_id!r} asks for pinning; connect with"
                f" pinning=True to a server started with --scheduler-cls"
                f" {PINNING_SCHEDULER_CLS}"
            )
        server_id = f"kalypso-{uuid.uuid4().hex}"
        body: dict[str, Any] = {
            "model": self._model,
            "prompt": list(request.prompt_token_ids),
            "max_tokens": request.max_tokens,
            "temperature": 0.0 if request.greedy else request.temperature,
            "priority": request.priority,
            "return_token_ids": True,
            "ignore_eos": request.ignore_eos,
            "request_id": server_id,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if not request.greedy:
            body["top_p"] = request.top_p
            if request.seed is not None:
                body["seed"] = request.seed
        pin_args = pin_extra_args(request.pin_key, request.pin_blocks, request.pin_soft)
        if pin_args is not None:
            body["vllm_xargs"] = pin_args
        if request.allowed_token_ids is not None:
            body["allowed_token_ids"] = list(request.allowed_token_ids)
        if request.logprobs is not None:
            body["logprobs"] = request.logprobs
            body["return_tokens_as_token_ids"] = True
        timeout_s = request.timeout_s or self._default_timeout_s
        logger.debug(
            "request %r (server id %s): %d prompt tokens, max_tokens=%d, priority %d",
            request.request_id,
            server_id,
            len(request.prompt_token_ids),
            request.max_tokens,
            request.priority,
        )
        started_s = time.monotonic()
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                response = await self._client.post("/v1/completions", json=body)
        except TimeoutError as exc:
            if not deadline.expired():
                raise EngineError(
                    f"request {request.request_id!r} to {self._base_url} failed: {exc!r}"
                ) from exc
            await self._after_timeout(request, server_id)
            raise EngineTimeoutError(
                f"request {request.request_id!r} to {self._base_url} did not finish within"
                f" {timeout_s} s; the connection was closed, so the server aborts it"
            ) from None
        except httpx.HTTPError as exc:
            unreachable = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            raise (EngineDeadError if unreachable else EngineError)(
                f"request {request.request_id!r} to {self._base_url}/v1/completions failed"
                f" ({exc!r}; connection failures were retried)"
            ) from exc
        if response.status_code != 200:
            raise EngineError(
                f"request {request.request_id!r}: {self._base_url}/v1/completions answered"
                f" HTTP {response.status_code}{_retries_note(response)}: {response.text[:500]}"
            )
        payload = response.json()
        choice = payload["choices"][0]
        usage = payload.get("usage") or {}
        details = usage.get("prompt_tokens_details")
        if details is None:
            raise EngineError(
                f"{self._base_url} does not report cached tokens; start it with"
                " --enable-prompt-tokens-details (kalypso engine serve does)"
            )
        finish_reason = as_finish_reason(choice.get("finish_reason"), request.request_id)
        total_s = time.monotonic() - started_s
        logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
        token_logprobs: tuple[float, ...] = ()
        if request.logprobs is not None:
            returned = choice.get("logprobs") or {}
            logprobs = parse_top_logprobs(returned.get("top_logprobs"), request.logprobs)
            token_logprobs = tuple(
                float("-inf") if value is None else float(value)
                for value in returned.get("token_logprobs") or ()
            )
        result = GenerateResult(
            request_id=request.request_id,
            output_token_ids=tuple(int(t) for t in choice.get("token_ids") or ()),
            text=choice.get("text", ""),
            finish_reason=finish_reason,
            prompt_tokens=int(usage.get("prompt_tokens", len(request.prompt_token_ids))),
            cached_tokens=int(details.get("cached_tokens") or 0),
            timings=RequestTimings(queued_s=0.0, first_token_s=0.0, total_s=total_s),
            logprobs=logprobs,
            token_logprobs=token_logprobs,
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

    async def _after_timeout(self, request: GenerateRequest, server_id: str) -> None:
        """With pinning, tell the scheduler not to pin the timed-out request (the
        server aborts it when it sees the closed connection)."""
        logger.info("request %r to %s timed out", request.request_id, self._base_url)
        if request.pin_key is None or not self._pinning:
            return
        try:
            async with asyncio.timeout(CONTROL_TIMEOUT_S):
                await self._control({CANCEL_ARG: f"cmpl-{server_id}"})
        except Exception as exc:  # the timeout is the error the caller gets
            logger.warning("cleanup after the timeout of %r failed: %r", request.request_id, exc)

    async def stats(self) -> EngineStats:
        """Counters and gauges from ``/metrics``; per-phase times are the sums of vLLM's
        request prefill and decode time histograms (finished requests)."""
        self._check_open()
        try:
            async with asyncio.timeout(METRICS_TIMEOUT_S):
                response = await self._client.get("/metrics")
        except (httpx.HTTPError, TimeoutError) as exc:
            raise EngineError(f"cannot read {self._base_url}/metrics: {exc!r}") from exc
        samples = parse_metrics(response.text)
        self._observe_steps(samples)
        return EngineStats(
            running_requests=int(_metric_sum(samples, "vllm:num_requests_running")),
            waiting_requests=int(_metric_sum(samples, "vllm:num_requests_waiting")),
            prefix_cache_queries_tokens=int(
                _metric_sum(samples, "vllm:prefix_cache_queries_total")
            ),
            prefix_cache_hits_tokens=int(_metric_sum(samples, "vllm:prefix_cache_hits_total")),
            kv_usage_fraction=_metric_sum(samples, "vllm:kv_cache_usage_perc"),
            prefill_time_s=_metric_sum(samples, "vllm:request_prefill_time_seconds_sum"),
            decode_time_s=_metric_sum(samples, "vllm:request_decode_time_seconds_sum"),
            preemptions=int(_metric_sum(samples, "vllm:num_preemptions_total")),
        )

    @property
    def cost_model(self) -> CostModel | None:
        """The calibrated or given model, refitted from the server's step counters."""
        return None if self._costs is None else self._costs.model

    def _observe_steps(self, samples: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        """Feed the cost model the steps run since the last scrape, when the server was
        busy at both scrapes (an idle gap would be charged to its steps)."""
        now = _StepCounters.of(samples)
        last, self._last_steps = self._last_steps, now
        if self._costs is None or last is None or now is None or not (last.busy and now.busy):
            return
        steps = int(now.steps - last.steps)
        if steps >= 1 and now.at_s > last.at_s:
            self._costs.observe(
                StepSample(
                    steps,
                    max(0, int(now.prefill_tokens - last.prefill_tokens)),
                    max(0, int(now.decode_tokens - last.decode_tokens)),
                    now.at_s - last.at_s,
                )
            )

    async def reset_prefix_cache(self) -> None:
        """Reset the server's prefix cache (needs its admin endpoints).

        Raises:
            UnsupportedFeatureError: the server runs without admin endpoints.
            EngineError: the server refused (requests running, or blocks pinned).
        """
        self._check_open()
        try:
            async with asyncio.timeout(self._default_timeout_s):
                response = await self._client.post("/reset_prefix_cache")
        except (httpx.HTTPError, TimeoutError) as exc:
            raise EngineError(f"{self._base_url}/reset_prefix_cache failed: {exc!r}") from exc
        if response.status_code == 404:
            raise UnsupportedFeatureError(
                f"{self._base_url} has no /reset_prefix_cache: it runs without vLLM's admin"
                " endpoints. Start it with VLLM_SERVER_DEV_MODE=1 (`kalypso engine serve"
                " --admin-endpoints`, or VLLMServer.start(..., admin_endpoints=True));"
                " they are unauthenticated, so only on a trusted host"
            )
        if response.status_code != 200:
            raise EngineError(f"{self._base_url}/reset_prefix_cache: HTTP {response.status_code}")
        if response.json().get("success") is False:
            pins = " or blocks pinned (unpin_all() first)" if self._pinning else ""
            raise EngineError(
                f"{self._base_url} refused to reset its prefix cache (requests still running{pins})"
            )
        logger.info("prefix cache of %s reset", self._base_url)

    async def unpin(self, pin_key: str) -> None:
        """Release the blocks pinned under ``pin_key`` (no-op for an unknown key); they
        stay cached, evictable like any free block.

        Raises:
            UnsupportedFeatureError: not connected with ``pinning=True``.
        """
        await self._control({UNPIN_ARG: pin_key})

    async def unpin_all(self) -> None:
        """Release every pin (for example to recover from a cache filled with pins).

        Raises:
            UnsupportedFeatureError: not connected with ``pinning=True``.
        """
        await self._control({UNPIN_ALL_ARG: 1})

    async def stalled_requests(self) -> int:
        """Requests the engine's next step leaves waiting while none runs (the pinning
        scheduler counts them at that step).

        Raises:
            UnsupportedFeatureError: the engine runs without the pinning scheduler.
        """
        return await self._control({STALLED_ARG: 1})

    async def _control(self, xargs: dict[str, Any]) -> int:
        """Send a control request to the pinning scheduler; returns the block references
        it released. It is answered after the next engine step, without being queued."""
        self._check_open()
        if not self._pinning:
            raise UnsupportedFeatureError(
                "this engine has no explicit pinning; connect with pinning=True to a"
                f" server started with --scheduler-cls {PINNING_SCHEDULER_CLS}"
            )
        body = {"model": self._model, "prompt": [0], "max_tokens": 1, "vllm_xargs": xargs}
        try:
            async with asyncio.timeout(self._default_timeout_s):
                response = await self._client.post("/v1/completions", json=body)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise EngineError(
                f"a pinning control request to {self._base_url} failed: {exc!r}"
            ) from exc
        if response.status_code != 200:
            raise EngineError(
                f"a pinning control request: {self._base_url} answered HTTP"
                f" {response.status_code}: {response.text[:500]}"
            )
        choices = response.json().get("choices") or [{}]
        stop_reason = choices[0].get("stop_reason")
        released = parse_control_stop_reason(stop_reason)
        if released is None:
            raise EngineError(
                f"{self._base_url} did not handle a pinning control request (stop reason"
                f" {stop_reason!r}); start it with --scheduler-cls {PINNING_SCHEDULER_CLS}"
            )
        return released

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.aclose()
            logger.info("disconnected from %s", self._base_url)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the engine is closed")


def _retries_note(response: httpx.Response) -> str:
    retry = response.extensions.get("retry")
    attempts = getattr(retry, "attempts_made", 0)
    return f" after {attempts} retries" if attempts else ""
