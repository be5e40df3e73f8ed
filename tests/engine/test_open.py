"""``open_engine`` on the simulator: the spec's overrides reach the engine, bad specs are
refused before anything starts."""

from __future__ import annotations

import pytest

from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import GenerateRequest


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


async def test_sim_spec_sets_the_length_of_free_form_answers() -> None:
    """Every free-form answer has between ``fewest`` and ``most`` tokens (the end of
    sequence included), well under a ``max_tokens`` that would cut it."""
    engine = await open_engine(EngineSpec(kind="sim", sim_output_tokens=(3, 5)))
    try:
        lengths = set()
        for i in range(40):
            prompt = tuple(engine.tokenizer.encode(f"describe item {i} in a few words"))
            result = await engine.generate(GenerateRequest(f"r{i}", prompt, max_tokens=64))
            lengths.add(result.output_tokens)
        assert lengths <= {3, 4, 5, 6} and len(lengths) > 1, lengths
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "gpu"}, "engine kind must be one of"),
        ({"kind": "sim", "sim_max_num_seqs": 0}, "sim_max_num_seqs must be >= 1, got 0"),
        ({"kind": "sim", "pinning": True, "lspf": True}, "different vLLM scheduler classes"),
        ({"kind": "sim", "sim_output_tokens": (0, 4)}, r"1 <= fewest <= most, got \(0, 4\)"),
        ({"kind": "sim", "sim_output_tokens": (9, 4)}, r"1 <= fewest <= most, got \(9, 4\)"),
    ],
)
def test_bad_specs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineSpec(**kwargs)  # type: ignore[arg-type]
