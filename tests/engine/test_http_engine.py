"""The HTTP engine against a scripted server (``httpx.MockTransport`` under the retry
transport): retries of transient failures, errors after them, timeouts, logprobs parsing,
aborts, per-phase times, the local-tokenizer requirement and the admin-endpoint hint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import httpx
import pytest

from kalypso.engine.protocol import (
    EngineError,
    EngineTimeoutError,
    GenerateRequest,
    RequestAbortedError,
    UnsupportedFeatureError,
)
from kalypso.engine.sim import WordTokenizer
from kalypso.engine.vllm_http import DEFAULT_RETRY, HTTPVLLMEngine, parse_top_logprobs

URL = "http://127.0.0.1:59999"

METRICS = """\
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="64"} 1.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 0.0
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf"} 3.0
vllm:request_prefill_time_seconds_count{engine="0"} 3.0
vllm:request_prefill_time_seconds_sum{engine="0"} 1.25
# TYPE vllm:request_decode_time_seconds histogram
vllm:request_decode_time_seconds_bucket{engine="0",le="+Inf"} 3.0
vllm:request_decode_time_seconds_count{engine="0"} 3.0
vllm:request_decode_time_seconds_sum{engine="0"} 4.5
"""

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def completion(
    token_ids: list[int],
    finish_reason: str = "stop",
    top_logprobs: list[dict[str, float]] | None = None,
) -> dict[str, object]:
    choice: dict[str, object] = {
        "text": "x",
        "token_ids": token_ids,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
    if top_logprobs is not None:
        choice["logprobs"] = {"top_logprobs": top_logprobs}
    return {
        "choices": [choice],
        "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}},
    }


class FakeServer:
    """Answers ``/v1/models`` and ``/metrics``; ``/v1/completions`` by a script."""

    def __init__(self, completions: Handler, root: str = "/not/on/this/machine") -> None:
        self.completions = completions
        self.root = root
        self.calls: dict[str, int] = {}
        self.bodies: list[dict[str, object]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls[path] = self.calls.get(path, 0) + 1
        if path == "/v1/models":
            card = {"id": "m", "max_model_len": 512, "root": self.root}
            return httpx.Response(200, json={"data": [card]})
        if path == "/metrics":
            return httpx.Response(200, text=METRICS)
        if path == "/v1/completions":
            self.bodies.append(json.loads(request.content))
            return await self.completions(request)
        return httpx.Response(404, json={"detail": "Not Found"})


async def _connect(server: FakeServer) -> HTTPVLLMEngine:
    return await HTTPVLLMEngine.connect(
        URL, tokenizer=WordTokenizer(), transport=httpx.MockTransport(server), calibrate=False
    )


def _request(request_id: str = "r", **kwargs: object) -> GenerateRequest:
    return GenerateRequest(request_id, (5, 6, 7), 2, **kwargs)  # type: ignore[arg-type]


def test_retry_policy_retries_posts_on_connect_errors_and_overload() -> None:
    assert DEFAULT_RETRY.is_retryable_method("POST")
    assert all(DEFAULT_RETRY.is_retryable_status_code(s) for s in (429, 502, 503, 504))
    assert not DEFAULT_RETRY.is_retryable_status_code(500)
    assert DEFAULT_RETRY.is_retryable_exception(httpx.ConnectError("refused"))
    assert not DEFAULT_RETRY.is_retryable_exception(httpx.ReadTimeout("slow"))
    assert not DEFAULT_RETRY.is_retryable_exception(httpx.RemoteProtocolError("dropped"))
    assert DEFAULT_RETRY.total == 3 and DEFAULT_RETRY.total_timeout is not None


@pytest.mark.parametrize("failure", ["503", "connect"])
async def test_a_server_that_fails_twice_then_answers_is_retried(failure: str) -> None:
    attempts = 0

    async def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:
            if failure == "connect":
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(503, text="loading")
        return httpx.Response(200, json=completion([9, 2]))

    server = FakeServer(flaky)
    engine = await _connect(server)
    try:
        result = await engine.generate(_request())
    finally:
        await engine.close()
    assert result.output_token_ids == (9, 2)
    assert attempts == 3


async def test_a_permanently_failing_server_is_a_clear_error_after_the_retries() -> None:
    async def overloaded(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="overloaded")

    server = FakeServer(overloaded)
    engine = await _connect(server)
    try:
        with pytest.raises(EngineError, match=rf"'r'.*{URL}/v1/completions.*503 after 3 retries"):
            await engine.generate(_request())
    finally:
        await engine.close()
    assert server.calls["/v1/completions"] == 4


async def test_an_unreachable_server_is_a_clear_error_after_the_retries() -> None:
    attempts = 0

    async def refused(request: httpx.Request) -> httpx.Response:
        nonlocal attempts
        attempts += 1
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(EngineError, match=rf"cannot reach a vLLM server at {URL}.*retried"):
        await HTTPVLLMEngine.connect(
            URL, tokenizer=WordTokenizer(), transport=httpx.MockTransport(refused)
        )
    assert attempts == 4


async def test_a_dropped_connection_is_not_retried() -> None:
    async def dropped(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("server disconnected", request=request)

    server = FakeServer(dropped)
    engine = await _connect(server)
    try:
        with pytest.raises(EngineError, match=rf"'r' to {URL}"):
            await engine.generate(_request())
    finally:
        await engine.close()
    assert server.calls["/v1/completions"] == 1


async def test_constrained_request_and_logprobs_round_trip() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        top = [{"token_id:10539": -1.8, "token_id:5230": -0.18}]
        return httpx.Response(200, json=completion([5230], "length", top))

    server = FakeServer(answer)
    engine = await _connect(server)
    try:
        result = await engine.generate(
            GenerateRequest("d", (5, 6, 7), 1, allowed_token_ids=(10539, 5230), logprobs=2)
        )
    finally:
        await engine.close()
    body = server.bodies[0]
    assert body["allowed_token_ids"] == [10539, 5230]
    assert body["logprobs"] == 2 and body["return_tokens_as_token_ids"] is True
    assert result.logprobs == (((5230, -0.18), (10539, -1.8)),)
    assert result.finish_reason == "length"


async def test_pin_key_blocks_and_softness_travel_in_vllm_xargs() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        xargs = body.get("vllm_xargs", {})
        if "kalypso_ping" in xargs or "kalypso_stalled" in xargs:
            reply = completion([], "stop")
            number = 2 if "kalypso_stalled" in xargs else 0
            reply["choices"][0]["stop_reason"] = f"kalypso-pinning:released={number}"  # type: ignore[index]
            return httpx.Response(200, json=reply)
        return httpx.Response(200, json=completion([9], "length"))

    server = FakeServer(answer)
    engine = await HTTPVLLMEngine.connect(
        URL,
        tokenizer=WordTokenizer(),
        transport=httpx.MockTransport(server),
        pinning=True,
        calibrate=False,
    )
    try:
        await engine.generate(_request("hard", pin_key="k1"))
        await engine.generate(_request("soft", pin_key="k2", pin_blocks=3, pin_soft=True))
        await engine.generate(_request("none"))
        assert await engine.stalled_requests() == 2
    finally:
        await engine.close()
    hard, soft, none = server.bodies[-4:-1]
    assert hard["vllm_xargs"] == {"kalypso_pin": "k1"}
    assert soft["vllm_xargs"] == {
        "kalypso_pin": "k2",
        "kalypso_pin_blocks": 3,
        "kalypso_pin_soft": 1,
    }
    assert "vllm_xargs" not in none


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pin_blocks": 2}, "pin_blocks and pin_soft need a pin_key"),
        ({"pin_soft": True}, "pin_blocks and pin_soft need a pin_key"),
        ({"pin_key": "k", "pin_blocks": -1}, "pin_blocks must be >= 0"),
    ],
)
def test_pin_options_without_a_key_or_below_zero_are_refused(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _request(**kwargs)


def test_parse_top_logprobs_orders_caps_and_rejects_text_keys() -> None:
    table = parse_top_logprobs([{"token_id:3": -2.0, "token_id:1": -0.5, "token_id:2": -0.5}], 2)
    assert table == (((1, -0.5), (2, -0.5)),)
    assert parse_top_logprobs(None, 3) == ()
    with pytest.raises(EngineError, match="return_tokens_as_token_ids"):
        parse_top_logprobs([{"Yes": -0.1}], 1)


async def test_an_aborted_request_is_an_error() -> None:
    async def aborted(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion([], "abort"))

    engine = await _connect(FakeServer(aborted))
    try:
        with pytest.raises(RequestAbortedError, match="'r'"):
            await engine.generate(_request())
    finally:
        await engine.close()


async def test_a_hung_server_times_out_and_the_next_request_is_served() -> None:
    hang = True

    async def maybe_hang(request: httpx.Request) -> httpx.Response:
        if hang:
            await asyncio.sleep(60)
        return httpx.Response(200, json=completion([4, 2]))

    engine = await _connect(FakeServer(maybe_hang))
    try:
        with pytest.raises(EngineTimeoutError, match=r"'slow'.*0\.2 s"):
            await engine.generate(_request("slow", timeout_s=0.2))
        hang = False
        assert (await engine.generate(_request("next"))).output_token_ids == (4, 2)
    finally:
        await engine.close()


async def test_the_engine_default_timeout_applies() -> None:
    async def hung(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(60)
        raise AssertionError("unreachable")

    engine = await HTTPVLLMEngine.connect(
        URL,
        tokenizer=WordTokenizer(),
        transport=httpx.MockTransport(FakeServer(hung)),
        default_timeout_s=0.2,
        calibrate=False,
    )
    try:
        with pytest.raises(EngineTimeoutError):
            await engine.generate(_request())
    finally:
        await engine.close()


async def test_stats_read_the_phase_time_histograms() -> None:
    engine = await _connect(FakeServer(lambda r: asyncio.sleep(0)))  # type: ignore[arg-type,return-value]
    try:
        stats = await engine.stats()
    finally:
        await engine.close()
    assert (stats.prefill_time_s, stats.decode_time_s) == (1.25, 4.5)
    assert engine.capacity.num_blocks == 63  # the gauge's 64 less vLLM's null block
    assert engine.capacity.max_model_len_tokens == 512


async def test_connect_takes_the_servers_width_when_told() -> None:
    """vLLM's metrics do not report ``max_num_seqs``: the caller that started the server
    passes it, and it is checked."""
    server = FakeServer(lambda r: asyncio.sleep(0))  # type: ignore[arg-type,return-value]
    engine = await HTTPVLLMEngine.connect(
        URL,
        tokenizer=WordTokenizer(),
        transport=httpx.MockTransport(server),
        max_running_requests=16,
        calibrate=False,
    )
    try:
        assert engine.capacity.max_running_requests == 16
        assert engine.capacity.num_blocks == 63
    finally:
        await engine.close()
    with pytest.raises(ValueError, match="max_running_requests must be >= 1, got 0"):
        await HTTPVLLMEngine.connect(URL, tokenizer=WordTokenizer(), max_running_requests=0)


async def test_connect_needs_a_local_tokenizer() -> None:
    server = FakeServer(lambda r: asyncio.sleep(0))  # type: ignore[arg-type,return-value]
    with pytest.raises(EngineError, match=r"/not/on/this/machine.*tokenizer="):
        await HTTPVLLMEngine.connect(URL, transport=httpx.MockTransport(server))


async def test_reset_without_admin_endpoints_says_how_to_enable_them() -> None:
    engine = await _connect(FakeServer(lambda r: asyncio.sleep(0)))  # type: ignore[arg-type,return-value]
    try:
        with pytest.raises(UnsupportedFeatureError, match="--admin-endpoints"):
            await engine.reset_prefix_cache()
    finally:
        await engine.close()


def _step_metrics(steps: int, computed: int, generated: int, running: int) -> str:
    return METRICS.replace(
        'vllm:num_requests_running{engine="0"} 0.0',
        f'vllm:num_requests_running{{engine="0"}} {running}.0',
    ) + (
        "# TYPE vllm:iteration_tokens_total histogram\n"
        f'vllm:iteration_tokens_total_count{{engine="0"}} {steps}.0\n'
        f'vllm:iteration_tokens_total_sum{{engine="0"}} {computed + generated}.0\n'
        "# TYPE vllm:prompt_tokens_by_source counter\n"
        f'vllm:prompt_tokens_by_source_total{{engine="0",source="local_compute"}} {computed}.0\n'
        'vllm:prompt_tokens_by_source_total{engine="0",source="local_cache_hit"} 999.0\n'
        "# TYPE vllm:generation_tokens counter\n"
        f'vllm:generation_tokens_total{{engine="0"}} {generated}.0\n'
    )


async def test_a_given_cost_model_is_refitted_from_the_servers_step_counters() -> None:
    """Between two scrapes of a busy server, the steps it ran (its per-iteration token
    histogram's count), the prompt tokens it computed and the tokens it generated, over
    the seconds between, are one observation of the model; an idle scrape gives none."""
    from kalypso.engine.cost_model import CostModel

    scrapes = iter(
        [
            _step_metrics(0, 0, 0, running=2),
            _step_metrics(100, 20_000, 1_000, running=3),
            _step_metrics(100, 20_000, 1_000, running=0),  # idle: no observation
            _step_metrics(150, 20_000, 2_000, running=5),
        ]
    )

    class Scripted(FakeServer):
        async def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/metrics" and self.calls.get("/v1/models"):
                self.calls["/metrics"] = self.calls.get("/metrics", 0) + 1
                if self.calls["/metrics"] > 1:  # the first read is the capacity's
                    return httpx.Response(200, text=next(scrapes))
            return await super().__call__(request)

    given = CostModel(0.01, 0.0001, 0.001, source="given")
    engine = await HTTPVLLMEngine.connect(
        URL,
        tokenizer=WordTokenizer(),
        transport=httpx.MockTransport(Scripted(lambda r: asyncio.sleep(0))),  # type: ignore[arg-type,return-value]
        cost_model=given,
        max_running_requests=8,
    )
    try:
        assert engine.cost_model == given.with_limits(None, 8)
        for _ in range(4):
            await engine.stats()
        costs = engine._costs
        assert costs is not None and (costs.samples, costs.steps) == (1, 100)
        assert costs.refit().source == "given, refitted over 100 observed steps"
    finally:
        await engine.close()
