"""VLLMSettings: KV sizing for every dtype, deterministic mode, and the one mapping to engine
arguments shared by the in-process engine and the server command line (checked against
vLLM's own argument parser, without starting an engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kalypso.engine.protocol import EngineError
from kalypso.engine.vllm_server import default_served_name, server_command
from kalypso.engine.vllm_settings import (
    LOGPROBS_MODE,
    VLLMSettings,
    default_max_model_len_tokens,
    dtype_bytes,
    engine_args,
    engine_cli_args,
    kv_bytes_per_token,
    kv_cache_groups,
    usable_blocks,
)
from kalypso.models import SERVED_MODEL_NAME, resolve_model

# SmolLM2-135M: 30 layers x 3 KV heads x 64 dims, K and V
SMOLLM2_ELEMENTS_PER_TOKEN = 2 * 30 * 3 * 64


def _config(tmp_path: Path, **extra: object) -> str:
    config = {
        "num_attention_heads": 9,
        "hidden_size": 576,
        "num_key_value_heads": 3,
        "num_hidden_layers": 30,
        "max_position_embeddings": 8192,
        **extra,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_dtype_bytes() -> None:
    assert dtype_bytes("float32") == dtype_bytes("float") == 4
    assert dtype_bytes("bfloat16") == dtype_bytes("float16") == dtype_bytes("torch.float16") == 2
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        dtype_bytes("int3")


def test_kv_bytes_per_token_uses_the_dtype(tmp_path: Path) -> None:
    folder = _config(tmp_path)
    assert kv_bytes_per_token(folder) == SMOLLM2_ELEMENTS_PER_TOKEN * 2 == 23_040
    assert kv_bytes_per_token(folder, "bfloat16") == 23_040
    assert kv_bytes_per_token(folder, "float32") == 46_080
    assert kv_bytes_per_token(folder, "auto") == 23_040  # no dtype in the config: bf16
    assert kv_bytes_per_token(str(tmp_path / "missing")) is None


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("torch_dtype", "float32", 46_080),
        ("dtype", "float32", 46_080),
        ("dtype", "float16", 23_040),
    ],
)
def test_auto_dtype_reads_the_model_config(
    tmp_path: Path, key: str, value: str, expected: int
) -> None:
    assert kv_bytes_per_token(_config(tmp_path, **{key: value}), "auto") == expected


def test_default_context_fits_the_cache_in_float32(tmp_path: Path) -> None:
    folder = _config(tmp_path)
    kv_bytes = 16 * 128 * 46_080  # 16 blocks of 128 float32 tokens
    assert default_max_model_len_tokens(folder, kv_bytes, "float32") == (2048 // 256 - 1) * 256
    # the same bytes hold twice the tokens in bf16: up to the model's 8,192, minus a margin
    assert default_max_model_len_tokens(folder, kv_bytes, "bfloat16") == (4096 // 256 - 1) * 256
    with pytest.raises(EngineError, match="float32"):
        default_max_model_len_tokens(folder, 256 * 46_080, "float32")


def test_deterministic_mode_runs_float32_and_sizes_the_context_for_it(tmp_path: Path) -> None:
    folder = _config(tmp_path)
    kv_bytes = 16 * 128 * 46_080
    settings = VLLMSettings(kv_cache_bytes=kv_bytes, deterministic=True)
    assert settings.effective_dtype == "float32"
    args = engine_args(settings, folder)
    assert args["dtype"] == "float32"
    assert args["max_model_len"] == 1792  # a float32 sequence must fit 16 x 128 tokens
    assert engine_args(VLLMSettings(kv_cache_bytes=kv_bytes), folder)["max_model_len"] == 3840


def test_engine_args_are_one_mapping_with_extra_args_last(tmp_path: Path) -> None:
    folder = _config(tmp_path)
    settings = VLLMSettings(
        kv_cache_bytes=64 * 2**20,
        block_size_tokens=32,
        scheduler_cls="some.Scheduler",
        extra_engine_args={"max_logprobs": 7, "enforce_eager": False},
    )
    args = engine_args(settings, folder)
    assert args["logprobs_mode"] == LOGPROBS_MODE == "processed_logprobs"
    assert args["enable_prefix_caching"] is True
    assert args["scheduling_policy"] == "priority"
    assert args["block_size"] == 32 and args["scheduler_cls"] == "some.Scheduler"
    assert args["max_logprobs"] == 7 and args["enforce_eager"] is False
    cli = engine_cli_args(args)
    assert cli[cli.index("--max-logprobs") + 1] == "7"
    assert "--no-enforce-eager" in cli and "--enable-prefix-caching" in cli
    assert engine_cli_args({"x_y": None, "z": {"a": 1}, "w": [1, 2]}) == [
        "--z",
        '{"a": 1}',
        "--w",
        "1",
        "2",
    ]


def test_settings_validate_the_default_timeout() -> None:
    with pytest.raises(ValueError, match="default_timeout_s"):
        VLLMSettings(default_timeout_s=0)


def test_server_command_parses_to_the_in_process_engine_args() -> None:
    """vLLM's own server parser turns the command line back into the same arguments the
    in-process engine gets (extra_engine_args included)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    settings = VLLMSettings(
        kv_cache_bytes=64 * 2**20,
        block_size_tokens=32,
        deterministic=True,
        scheduler_cls="kalypso.engine.vllm_pinning.PinningScheduler",
        extra_engine_args={"max_logprobs": 7, "disable_sliding_window": True},
    )
    command = server_command(settings, 8123, "served")
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    namespace = make_arg_parser(FlexibleArgumentParser()).parse_args(command[3:])
    parsed = AsyncEngineArgs.from_cli_args(namespace)
    expected = engine_args(settings, resolve_model(settings.model))
    assert {key: getattr(parsed, key) for key in expected} == expected
    assert namespace.enable_prompt_tokens_details is True
    assert (namespace.host, namespace.port) == ("127.0.0.1", 8123)


GEMMA3_LAYER_TYPES = (["sliding_attention"] * 5 + ["full_attention"]) * 3


@pytest.mark.parametrize(
    ("layer_types", "groups"),
    [
        (None, 1),  # no layer types: every layer full attention
        (["full_attention"] * 30, 1),
        (GEMMA3_LAYER_TYPES, 6),  # 3 full = 1 group of 3, 15 sliding = 5 groups of 3
        (["sliding_attention"] * 12 + ["full_attention"] * 13, 2),  # padded to 13 + 13
    ],
)
def test_kv_cache_groups_follow_vllms_hybrid_grouping(
    tmp_path: Path, layer_types: list[str] | None, groups: int
) -> None:
    extra = {} if layer_types is None else {"layer_types": layer_types}
    assert kv_cache_groups(_config(tmp_path, **extra)) == groups


def test_kv_cache_groups_of_no_local_folder_is_one(tmp_path: Path) -> None:
    assert kv_cache_groups("") == 1
    assert kv_cache_groups(str(tmp_path / "missing")) == 1


def test_usable_blocks_leave_the_null_block_and_divide_by_the_groups() -> None:
    assert usable_blocks(45) == 44
    # Gemma 3 at 6,912 tokens of full attention: vLLM reports 6 x 216 blocks of 32 tokens
    assert usable_blocks(6 * 216, 6) == 215


def test_servers_are_named_after_their_model() -> None:
    assert default_served_name("bundled") == SERVED_MODEL_NAME
    assert default_served_name("/cache/models/gemma3-270m/") == "kalypso-gemma3-270m"
    assert default_served_name("google/gemma-3-270m") == "kalypso-gemma-3-270m"


def test_settings_refuse_no_running_requests() -> None:
    """``max_num_seqs`` also becomes the HTTP engine's width (operator-at-a-time's pace):
    0 is refused here, before a server is started, not by vLLM after it."""
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1, got 0"):
        VLLMSettings(max_num_seqs=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens must be >= 1, got 0"):
        VLLMSettings(max_num_batched_tokens=0)
