"""A running vLLM OpenAI-compatible server, reached over HTTP, behind the engine protocol.

* requests: ``POST /v1/completions`` with the prompt as token ids, ``priority`` and
  ``return_token_ids``; cached tokens come from ``usage.prompt_tokens_details`` (the
  server must run with ``--enable-prompt-tokens-details``; ``kalypso engine serve`` does);
* capacity: the ``vllm:cache_config_info`` gauge of ``/metrics`` (``num_gpu_blocks``,
  ``block_size``) and ``max_model_len`` from ``/v1/models``;
* live stats: the ``/metrics`` counters and gauges;
* tokenizer: the model's own, loaded locally when the server's model folder is on this
  machine, else the server's ``/tokenize`` and ``/detokenize`` endpoints.
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
    ) -> None:
        self._client = client
        self._base_url = base_url
        self._model = model
        self._capacity = capacity
        self._tokenizer = tokenizer
        self._closed = False

    @classmethod
    async def connect(
        cls, base_url: str, model: str | None = None, *, timeout_s: float = 600.0
    ) -> HTTPVLLMEngine:
        """Connect to the server at ``base_url`` (for example ``http://127.0.0.1:8000``).

        Args:
            model: the served model name; default: the only model the server serves.

        Raises:
            EngineError: the server is unreachable (naming the URL), serves no model of
                that name (naming the served ones), or lacks the metrics Kalypso needs.
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
        except BaseException:
            await client.aclose()
            raise
        return cls(client, base_url, model, capacity, tokenizer)

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
    def capacity(self) -> EngineCapacity:
        return self._capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def supports_pinning(self) -> bool:
        return False

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self._check_open()
        check_fits_context(request, self._capacity)
        if request.pin_key is not None:
            raise UnsupportedFeatureError(
                f"request {request.request_id!r} asks for pinning, which this engine lacks"
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

    async def unpin(self, pin_key: str) -> None:
        raise UnsupportedFeatureError("this engine has no explicit pinning")

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the engine is closed")
