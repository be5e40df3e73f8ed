"""``open_engine`` on the simulator: the spec's overrides reach the engine, bad specs are
refused before anything starts."""

from __future__ import annotations

import pytest

from kalypso.engine.open import EngineSpec, open_engine


async def test_sim_spec_sets_capacity_and_width() -> None:
    spec = EngineSpec(kind="sim", sim_blocks=44, sim_block_size_tokens=32, sim_max_num_seqs=16)
    engine = await open_engine(spec)
    try:
        capacity = engine.capacity
        assert (capacity.num_blocks, capacity.block_size_tokens) == (44, 32)
        assert capacity.max_running_requests == 16
    finally:
        await engine.close()


async def test_sim_width_defaults_to_the_simulators() -> None:
    engine = await open_engine(EngineSpec(kind="sim"))
    try:
        assert engine.capacity.max_running_requests == 256
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "gpu"}, "engine kind must be one of"),
        ({"kind": "sim", "sim_max_num_seqs": 0}, "sim_max_num_seqs must be >= 1, got 0"),
        ({"kind": "sim", "pinning": True, "lspf": True}, "different vLLM scheduler classes"),
    ],
)
def test_bad_specs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineSpec(**kwargs)  # type: ignore[arg-type]
