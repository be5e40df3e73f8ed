"""``any_engine``: every backend behind the engine protocol, for the conformance tests.

* module-scoped, so the last vLLM engine of the conformance suite is stopped when that
  module ends, before other modules start engines of their own (one vLLM engine at a time);
* the HTTP server is started with its admin endpoints (``/reset_prefix_cache``), which
  servers no longer open by default.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import CONFORMANCE_KV_BLOCKS, EngineUnderTest, conformance_vllm_settings


@pytest.fixture(
    scope="module",
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
            yield EngineUnderTest(local, kind, CONFORMANCE_KV_BLOCKS - 1)  # less the null block
        finally:
            await local.close()
    else:
        from kalypso.engine.vllm_http import HTTPVLLMEngine
        from kalypso.engine.vllm_server import VLLMServer

        server = VLLMServer.start(conformance_vllm_settings(), admin_endpoints=True)
        try:
            http = await HTTPVLLMEngine.connect(server.base_url)
            try:
                yield EngineUnderTest(http, kind, CONFORMANCE_KV_BLOCKS - 1)
            finally:
                await http.close()
        finally:
            server.stop()
