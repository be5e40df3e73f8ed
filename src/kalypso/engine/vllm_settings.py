"""Settings shared by the in-process vLLM engine and the vLLM server launcher, and the
KV-cache sizing arithmetic both need."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kalypso.engine.protocol import EngineError
from kalypso.models import BUNDLED_MODEL_NAME

DEFAULT_KV_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class VLLMSettings:
    """How to start vLLM, in-process or as a server (same settings, same engine).

    Attributes:
        model: ``"bundled"``, a local Hugging Face folder, or a Hugging Face id.
        kv_cache_bytes: KV cache size in bytes (vLLM's ``kv_cache_memory_bytes``).
        max_model_len_tokens: context limit; default: the model's, capped to the KV cache.
        max_num_seqs: most requests running at once.
        max_num_batched_tokens: token budget per engine step (chunked prefill).
        block_size_tokens: tokens per KV block, the prefix cache's granularity (a shared
            prefix is reused in whole blocks). None: vLLM's default (128 on CPU, 16 on GPU).
            The CPU kernels want a multiple of 32.
        enforce_eager: skip graph compilation (start in seconds instead of a minute on CPU).
        dtype: weights and activations ("bfloat16" on CPU and most GPUs).
        seed: sampling seed.
        scheduler_cls: a vLLM scheduler class path (explicit pinning uses one).
        extra_engine_args: passed unchanged to ``AsyncEngineArgs`` (in-process only).
    """

    model: str = BUNDLED_MODEL_NAME
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES
    max_model_len_tokens: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    block_size_tokens: int | None = None
    enforce_eager: bool = True
    dtype: str = "bfloat16"
    seed: int = 0
    scheduler_cls: str | None = None
    extra_engine_args: dict[str, Any] = field(default_factory=dict)


def kv_bytes_per_token(model_path: str, dtype_bytes: int = 2) -> int | None:
    """KV cache bytes one token takes (K and V, every layer), from a local ``config.json``.

    Returns None when the folder or fields are not there (a hub id, an unusual model).
    """
    config_path = Path(model_path) / "config.json"
    if not config_path.is_file():
        return None
    config = json.loads(config_path.read_text())
    try:
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        layers = int(config["num_hidden_layers"])
    except (KeyError, ValueError):
        return None
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def default_max_model_len_tokens(model_path: str, kv_cache_bytes: int) -> int | None:
    """A context limit that fits the KV cache: vLLM refuses to start when one sequence of
    the model's full length cannot fit. Rounded down to 256 tokens (a multiple of both the
    CPU block size, 128, and the GPU one, 16), leaving one 256-token margin. None lets vLLM
    use the model's own limit."""
    per_token = kv_bytes_per_token(model_path)
    if per_token is None:
        return None
    config = json.loads((Path(model_path) / "config.json").read_text())
    model_len = int(config.get("max_position_embeddings") or 2048)
    fits_tokens = (kv_cache_bytes // per_token // 256 - 1) * 256
    if fits_tokens < 256:
        raise EngineError(
            f"a KV cache of {kv_cache_bytes} bytes holds under 512 tokens of this model"
            f" ({per_token} bytes per token); give it more memory"
        )
    return min(model_len, fits_tokens)
