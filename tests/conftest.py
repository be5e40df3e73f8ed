"""Shared test helpers: the engine-conformance settings (small KV cache of
``CONFORMANCE_KV_BLOCKS`` blocks and ``max_num_seqs=1``, so memory pressure and admission
order are easy to provoke). The ``any_engine`` fixture is in ``tests/engine/conftest.py``."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from kalypso.engine.protocol import Engine, EngineStats, GenerateRequest, GenerateResult
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.models import resolve_model

if TYPE_CHECKING:
    from kalypso.engine.vllm_local import LocalVLLMEngine

CONFORMANCE_KV_BLOCKS = 16
VLLM_CPU_BLOCK_SIZE_TOKENS = 128


@dataclass(frozen=True)
class EngineUnderTest:
    engine: Engine
    kind: str
    expected_num_blocks: int


def deterministic_vllm_settings(kv_blocks: int, max_num_seqs: int) -> VLLMSettings:
    """The bundled model in float32 (the deterministic mode: answers independent of the
    CPU's bf16 rounding, and on CPUs without AVX-512 about 10x faster than vLLM's bf16
    path) with a KV cache of ``kv_blocks`` CPU blocks."""
    per_token = kv_bytes_per_token(resolve_model(), "float32")
    assert per_token is not None
    kv_bytes = kv_blocks * VLLM_CPU_BLOCK_SIZE_TOKENS * per_token
    return VLLMSettings(kv_cache_bytes=kv_bytes, max_num_seqs=max_num_seqs, deterministic=True)


def conformance_vllm_settings() -> VLLMSettings:
    return deterministic_vllm_settings(CONFORMANCE_KV_BLOCKS, max_num_seqs=1)


ROOMY_KV_BLOCKS = 40
"""The shared engine's cache (5,120 tokens): room for every prompt of the tests that use
it at once, so nothing they compare is evicted."""


@pytest.fixture(scope="session")
async def roomy_vllm() -> AsyncIterator[LocalVLLMEngine]:
    """One in-process vLLM engine (deterministic, ``ROOMY_KV_BLOCKS`` blocks, 8 sequences)
    shared by the modules whose tests need no particular cache size, started when the
    first asks for it (an engine start costs about 25 s here). Tests leave it as they
    found it: nothing running; they reset its prefix cache when they compare hits."""
    from kalypso.engine.vllm_local import LocalVLLMEngine

    engine = await LocalVLLMEngine.start(deterministic_vllm_settings(ROOMY_KV_BLOCKS, 8))
    try:
        yield engine
    finally:
        await engine.close()


async def poll_stats_until(
    engine_stats_ok: Callable[[EngineStats], bool],
    engine: Engine,
    gave_up: Callable[[], bool],
    max_polls: int = 3000,
) -> None:
    """Poll ``engine.stats()`` until ``engine_stats_ok`` holds or ``gave_up()`` does, at
    most ``max_polls`` times (about ``max_polls / 100`` seconds).

    The simulator runs on a virtual clock: any wall-clock sleep lets it run ahead, so the
    first polls are bare yields; real engines need real time."""
    for poll in range(max_polls):
        if engine_stats_ok(await engine.stats()) or gave_up():
            return
        await asyncio.sleep(0 if poll < 50 else 0.01)


def long_request(request_id: str, engine: Engine) -> GenerateRequest:
    """A request that decodes as many tokens as the context holds (tens of seconds on CPU)."""
    prompt = tuple(range(100, 400))
    max_tokens = engine.capacity.max_model_len_tokens - len(prompt) - 8
    return GenerateRequest(request_id, prompt, max_tokens=max_tokens, ignore_eos=True)


async def start_long_request(engine: Engine) -> asyncio.Future[GenerateResult]:
    """Send the doomed request and return once the engine reports it running: the kill
    that follows then lands mid-request on any machine, however fast or loaded."""
    in_flight = asyncio.ensure_future(engine.generate(long_request("doomed", engine)))
    await poll_stats_until(
        lambda s: s.running_requests >= 1, engine, in_flight.done, max_polls=6000
    )
    assert not in_flight.done(), "the long request finished before the engine was killed"
    return in_flight


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """A SIGTERM to the test run ends it like Ctrl-C: pytest then runs the fixtures'
    teardowns, so vLLM servers and engines that tests started are stopped instead of
    outliving the run (by default SIGTERM kills pytest on the spot)."""
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


OTHER_STREAM = frozenset({"test_vllm_calibration.py"})
"""Engine-layer modules run with the other engine tests: the engine layer's stream is the
longer of the two (about 22 against 19 minutes from a fresh clone here), and this one
starts an engine of its own (about 80 s)."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``engines`` the tests that start real engines (marked ``vllm``, and the Ray
    cluster's), and ``engine_layer`` those of them in ``tests/engine`` except the modules
    of :data:`OTHER_STREAM`: ``make test`` (``scripts/test-suite``) runs the two kinds in
    two processes, each one test after another (so at most two engines at once on this
    machine, and each session-shared engine started once), and the other tests beside
    them."""
    for item in items:
        if item.get_closest_marker("vllm") is not None or item.path.parent.name == "ray":
            item.add_marker(pytest.mark.engines)
            if item.path.parent.name == "engine" and item.path.name not in OTHER_STREAM:
                item.add_marker(pytest.mark.engine_layer)
