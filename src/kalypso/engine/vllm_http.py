"""A running vLLM OpenAI-compatible server, reached over HTTP, behind the engine protocol.

* requests: ``POST /v1/completions`` with the prompt as token ids, ``priority`` and
  ``return_token_ids``; cached tokens come from ``usage.prompt_tokens_details`` (the
  server must run with ``--enable-prompt-tokens-details``; ``kalypso engine serve`` does);
* capacity: the ``vllm:cache_config_info`` gauge of ``/metrics`` (``num_gpu_blocks``,
  ``block_size``) and ``max_model_len`` from ``/v1/models``;
* live stats: the ``/metrics`` counters and gauges;
* tokenizer: the model's own, loaded locally when the server's model folder is on this
  machine, else the server's ``/tokenize`` and ``/detokenize`` endpoints;
* explicit pinning, when the server runs Kalypso's pinning scheduler
  (``--scheduler-cls kalypso.engine.vllm_pinning.PinningScheduler``, which
  ``VLLMServer.start(VLLMSettings(scheduler_cls=PINNING_SCHEDULER_CLS))`` passes) and the
  client says so (``connect(url, pinning=True)``, checked at connect): the pin key and the
  control requests of :meth:`HTTPVLLMEngine.unpin` and :meth:`HTTPVLLMEngine.unpin_all`
  travel in the completions body's ``vllm_xargs``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kalypso.engine.hf_tokenizer import load_hf_tokenizer
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
    PING_ARG,
    PINNING_SCHEDULER_CLS,
    UNPIN_ALL_ARG,
    UNPIN_ARG,
    parse_control_stop_reason,
)


class _ServerTokenizer:
    """Tokenizes with the server's ``/tokenize`` and ``/detokenize`` (synchronous HTTP)."""

    def __init__(self, base_url: str, model: str, eos_token_id: int | None) -> None:
        self._client = httpx.Client(base_url=base_url, timeout=30.0)
        self._model = model
        self._eos = eos_token_id

    def encode(self, text: str) -> list[int]:
        body = {"model": self._model, "prompt": text, "add_special_tokens": False}
        response = self._client.post("/tokenize", json=body)
        response.raise_for_status()
        return [int(t) for t in response.json()["tokens"]]

    def decode(self, token_ids: Sequence[int]) -> str:
        body = {"model": self._model, "tokens": list(token_ids)}
        response = self._client.post("/detokenize", json=body)
        response.raise_for_status()
        return str(response.json()["prompt"])

    @property
    def eos_token_id(self) -> int | None:
        return self._eos


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text into {sample name: [(labels, value), ...]}."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def _metric_sum(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, []))


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
    ) -> None:
        self._client = client
        self._base_url = base_url
        self._model = model
        self._capacity = capacity
        self._tokenizer = tokenizer
        self._pinning = pinning
        self._closed = False

    @classmethod
    async def connect(
        cls,
        base_url: str,
        model: str | None = None,
        *,
        timeout_s: float = 600.0,
        pinning: bool = False,
    ) -> HTTPVLLMEngine:
        """Connect to the server at ``base_url`` (for example ``http://127.0.0.1:8000``).

        Args:
            model: the served model name; default: the only model the server serves.
            pinning: use explicit pinning; the server must run Kalypso's pinning
                scheduler, which is checked here with one control request (answered
                without running the model). When false (the default) nothing is sent,
                and pin keys are rejected with ``UnsupportedFeatureError``.

        Raises:
            EngineError: the server is unreachable (naming the URL), serves no model of
                that name (naming the served ones), lacks the metrics Kalypso needs, or
                (with ``pinning=True``) does not run the pinning scheduler.
        """
        base_url = base_url.rstrip("/").removesuffix("/v1")
        client = httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
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
            capacity = await cls._read_capacity(
                client, base_url, int(card.get("max_model_len") or 0)
            )
            tokenizer = cls._tokenizer_for(base_url, model, str(card.get("root") or ""))
            engine = cls(client, base_url, model, capacity, tokenizer, pinning)
            if pinning:
                await engine._control({PING_ARG: 1})
        except BaseException:
            await client.aclose()
            raise
        return engine

    @staticmethod
    async def _served_models(client: httpx.AsyncClient, base_url: str) -> list[dict[str, Any]]:
        try:
            response = await client.get("/v1/models", timeout=10.0)
        except httpx.HTTPError as exc:
            raise EngineError(f"cannot reach a vLLM server at {base_url}: {exc!r}") from exc
        if response.status_code != 200:
            raise EngineError(f"{base_url}/v1/models answered HTTP {response.status_code}")
        return list(response.json().get("data", []))

    @staticmethod
    async def _read_capacity(
        client: httpx.AsyncClient, base_url: str, max_model_len: int
    ) -> EngineCapacity:
        response = await client.get("/metrics", timeout=10.0)
        samples = parse_metrics(response.text)
        info = samples.get("vllm:cache_config_info")
        if not info:
            raise EngineError(f"{base_url}/metrics has no vllm:cache_config_info gauge")
        labels = info[0][0]
        return EngineCapacity(
            num_blocks=int(labels["num_gpu_blocks"]),
            block_size_tokens=int(labels["block_size"]),
            max_model_len_tokens=max_model_len,
        )

    @staticmethod
    def _tokenizer_for(base_url: str, model: str, root: str) -> Tokenizer:
        if root and (Path(root) / "tokenizer.json").is_file():
            return load_hf_tokenizer(root)
        return _ServerTokenizer(base_url, model, eos_token_id=None)

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
        self._check_open()
        check_fits_context(request, self._capacity)
        if request.pin_key is not None and not self._pinning:
            raise UnsupportedFeatureError(
                f"request {request.request_id!r} asks for pinning; connect with"
                f" pinning=True to a server started with --scheduler-cls"
                f" {PINNING_SCHEDULER_CLS}"
            )
        body: dict[str, Any] = {
            "model": self._model,
            "prompt": list(request.prompt_token_ids),
            "max_tokens": request.max_tokens,
            "temperature": 0.0 if request.greedy else request.temperature,
            "priority": request.priority,
            "return_token_ids": True,
            "ignore_eos": request.ignore_eos,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if request.pin_key is not None:
            body["vllm_xargs"] = {PIN_ARG: request.pin_key}
        loop_time = time.monotonic()
        try:
            response = await self._client.post("/v1/completions", json=body)
        except httpx.HTTPError as exc:
            raise EngineError(
                f"request {request.request_id!r} to {self._base_url} failed: {exc!r}"
            ) from exc
        if response.status_code != 200:
            raise EngineError(
                f"request {request.request_id!r}: {self._base_url} answered HTTP"
                f" {response.status_code}: {response.text[:500]}"
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
        total_s = time.monotonic() - loop_time
        finish = choice.get("finish_reason")
        return GenerateResult(
            request_id=request.request_id,
            output_token_ids=tuple(choice.get("token_ids") or ()),
            text=choice.get("text", ""),
            finish_reason=as_finish_reason(finish),
            prompt_tokens=int(usage.get("prompt_tokens", len(request.prompt_token_ids))),
            cached_tokens=int(details.get("cached_tokens") or 0),
            timings=RequestTimings(queued_s=0.0, first_token_s=0.0, total_s=total_s),
        )

    async def stats(self) -> EngineStats:
        self._check_open()
        samples = parse_metrics((await self._client.get("/metrics")).text)
        return EngineStats(
            running_requests=int(_metric_sum(samples, "vllm:num_requests_running")),
            waiting_requests=int(_metric_sum(samples, "vllm:num_requests_waiting")),
            prefix_cache_queries_tokens=int(
                _metric_sum(samples, "vllm:prefix_cache_queries_total")
            ),
            prefix_cache_hits_tokens=int(_metric_sum(samples, "vllm:prefix_cache_hits_total")),
            kv_usage_fraction=_metric_sum(samples, "vllm:kv_cache_usage_perc"),
        )

    async def reset_prefix_cache(self) -> None:
        self._check_open()
        response = await self._client.post("/reset_prefix_cache")
        if response.status_code == 404:
            raise UnsupportedFeatureError(
                f"{self._base_url} has no /reset_prefix_cache; start the server with"
                " VLLM_SERVER_DEV_MODE=1 (kalypso engine serve does)"
            )
        if response.status_code != 200:
            raise EngineError(f"{self._base_url}/reset_prefix_cache: HTTP {response.status_code}")
        if response.json().get("success") is False:
            pins = " or blocks pinned (unpin_all() first)" if self._pinning else ""
            raise EngineError(
                f"{self._base_url} refused to reset its prefix cache (requests still running{pins})"
            )

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
            response = await self._client.post("/v1/completions", json=body)
        except httpx.HTTPError as exc:
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

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the engine is closed")
