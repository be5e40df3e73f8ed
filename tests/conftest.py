"""Engines for the tests: the simulator always, real vLLM on CPU with the bundled model.

vLLM engines are session-scoped and parametrized, so pytest runs every test of one engine
before starting the next, and only one vLLM engine is alive at a time. Each is started with
a small KV cache (``CONFORMANCE_KV_BLOCKS`` blocks) and ``max_num_seqs=1`` so that memory
pressure and admission order are easy to provoke and assert.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from kalypso.engine.protocol import Engine
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.models import resolve_model

CONFORMANCE_KV_BLOCKS = 16
VLLM_CPU_BLOCK_SIZE_TOKENS = 128


@dataclass(frozen=True)
class EngineUnderTest:
    engine: Engine
    kind: str
    expected_num_blocks: int


def conformance_vllm_settings() -> VLLMSettings:
    per_token = kv_bytes_per_token(resolve_model())
    assert per_token is not None
    kv_bytes = CONFORMANCE_KV_BLOCKS * VLLM_CPU_BLOCK_SIZE_TOKENS * per_token
    return VLLMSettings(kv_cache_bytes=kv_bytes, max_num_seqs=1)


@pytest.fixture(
    scope="session",
    params=[
        "sim",
        pytest.param("vllm-local", marks=pytest.mark.vllm),
        pytest.param("vllm-http", marks=pytest.mark.vllm),
    ],
)
async def any_engine(request: pytest.FixtureRequest) -> AsyncIterator[EngineUnderTest]:
    """Every backend behind the engine protocol, one at a time."""
    kind = request.param
    if kind == "sim":
        from kalypso.engine.sim import SimEngine

        sim = SimEngine(num_blocks=CONFORMANCE_KV_BLOCKS, block_size_tokens=16, max_num_seqs=1)
        yield EngineUnderTest(sim, kind, CONFORMANCE_KV_BLOCKS)
        await sim.close()
    elif kind == "vllm-local":
        from kalypso.engine.vllm_local import LocalVLLMEngine

        local = await LocalVLLMEngine.start(conformance_vllm_settings())
        try:
            yield EngineUnderTest(local, kind, CONFORMANCE_KV_BLOCKS)
        finally:
            await local.close()
    else:
        from kalypso.engine.vllm_http import HTTPVLLMEngine
        from kalypso.engine.vllm_server import VLLMServer

        server = VLLMServer.start(conformance_vllm_settings())
        try:
            http = await HTTPVLLMEngine.connect(server.base_url)
            try:
                yield EngineUnderTest(http, kind, CONFORMANCE_KV_BLOCKS)
            finally:
                await http.close()
        finally:
            server.stop()
