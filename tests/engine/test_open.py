"""``open_engine`` on the simulator: the spec's overrides reach the engine, bad specs are
refused before anything starts; the command lines' sizes (``--kv-cache-bytes 64MiB``)."""

from __future__ import annotations

import argparse

import pytest

from kalypso.engine.open import EngineSpec, open_engine, parse_size_bytes
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


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64MiB", 64 * 2**20),
        ("0.5GiB", 2**29),
        ("64MB", 64_000_000),
        ("1000", 1000),
        (" 2kib ", 2048),
    ],
)
def test_a_size_reads_with_or_without_a_unit(text: str, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "MiB", "big", "1.5.2GiB", "12 apples"])
def test_a_bad_size_is_refused_with_a_hint(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="try 64MiB"):
        parse_size_bytes(text)


def test_the_run_commands_choose_the_vllm_model_and_its_batch_limits() -> None:
    from kalypso.engine.open import add_engine_arguments, engine_spec

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser, replicas=True)
    default = engine_spec(parser.parse_args([])).settings
    assert (default.model, default.max_num_seqs, default.max_num_batched_tokens) == (
        "bundled",
        32,
        2048,
    )
    flags = ["--model", "/models/Qwen3-8B", "--max-num-seqs", "1024"]
    chosen = engine_spec(parser.parse_args([*flags, "--max-num-batched-tokens", "8192"]))
    assert chosen.settings.model == "/models/Qwen3-8B"
    assert (chosen.settings.max_num_seqs, chosen.settings.max_num_batched_tokens) == (1024, 8192)


@pytest.mark.parametrize("text", ["0", "-2", "1.5", "many", ""])
def test_a_bad_count_is_refused(text: str) -> None:
    from kalypso.engine.open import parse_count

    with pytest.raises(argparse.ArgumentTypeError, match="a whole number >= 1"):
        parse_count(text)
