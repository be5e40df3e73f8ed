"""Cost profiles: how long one simulated engine step takes, and the KV capacity it models.

One engine step computes a batch: some prompt tokens (prefill, possibly chunks of several
requests) and one token for each decoding request. Its duration on the virtual clock is::

    step_s = per_step_s
             + prefill_tokens_in_step * per_prefill_token_s
             + decode_seqs_in_step * per_decode_token_s

Five named profiles are registered in :data:`PROFILES`:

``"smollm2-cpu"``
    SmolLM2-135M-Instruct on vLLM's CPU backend with 2 cores, measured on 2026-11-29 by a
    calibration of one request at a time on an empty cache:
    prefill of 128-1,536 tokens fits 0.93 ms per token (about 1,070 tokens/s; the fitted
    intercept was slightly negative and is clamped to 0), and decoding one sequence
    takes 15.9 ms per token. The capacity is what vLLM allocates with Kalypso's default KV
    cache of 256 MiB: SmolLM2-135M keeps 2 (K, V) x 30 layers x 3 KV heads x 64 dims x
    2 bytes (bf16) = 23,040 bytes per token; vLLM's CPU backend uses 128-token blocks by
    default (vLLM 0.32 ``CpuPlatform.check_and_update_config``), so 256 MiB holds
    268,435,456 // (128 x 23,040) = 91 blocks (11,648 tokens). The context is the
    model's 8,192 tokens.

``"smollm2-cpu-f32"``
    The same model in float32 (the deterministic mode), measured on 2026-12-01 on an
    AMD EPYC host with 2 cores, AVX2 and no AVX-512, by the calibration that is now
    ``kalypso engine calibrate --full --deterministic``, decode measured at batches of 1-8:
    prefill 5.79 ms per token (about 173 tokens/s); a decode step 68.3 ms plus 3.4 ms
    per sequence, so 8 sequences decode in 96 ms per step against 546 ms one at a time.
    The single-request calibration of ``"smollm2-cpu"`` could not see that split: it
    charges each sequence its own 15.9 ms, so batching never pays there, and querywise
    (one query at a time) comes out fastest on the simulator while it is the slowest on
    real vLLM. The capacity: 256 MiB at 46,080 bytes per token (float32) in 128-token
    blocks is 45 blocks (5,760 tokens).

``"llama-3.3-70b-4xgpu"``
    Llama-3.3-70B-Instruct in BF16 on 4 x H100-SXM-80GB, tensor parallel 4, vLLM with
    ``gpu_memory_utilization=0.9``. Estimated from public hardware and model figures,
    not measured:

    * Prefill is compute-bound: about 2 x 70.6e9 = 141 GFLOP per token. Four H100 SXM
      give 4 x 989 = 3,956 dense BF16 TFLOP/s at peak; at the 35-45 % utilisation a
      tensor-parallel prefill typically reaches, that is 10,000-12,600 tokens/s. We take
      12,000 tokens/s.
    * Decode is bandwidth-bound: each step reads every GPU's weight shard
      (141 GB / 4 = 35 GB) at 3.35 TB/s, 10.5 ms at peak; with realistic bandwidth
      (about 70 %), two all-reduces per layer over 80 layers and scheduling overhead,
      about 22 ms per step. Each decoding sequence adds its KV reads and a share of the
      matmuls, about 0.15 ms (so 32 ms per step at 64 sequences, 60 ms at 256), which is
      within the 25-40 ms per step usually reported for 70B models on 4 GPUs.
    * Capacity: per GPU 0.9 x 79.6 GiB = 71.6 GiB, minus 32.9 GiB of weights
      (70.6e9 x 2 bytes / 4) and about 4 GiB of activations, leaves ~34.7 GiB for KV.
      Llama-3.3-70B keeps 2 x 80 layers x 8 KV heads x 128 dims x 2 bytes = 320 KiB per
      token, 80 KiB per GPU under TP 4, so ~455,000 tokens: 28,000 blocks of 16 tokens
      (448,000 tokens). An FP8 KV cache would double that (~900,000 tokens). The context
      is the model's 131,072 tokens.

``"qwen3-8b-h100"``
    Qwen3-8B in BF16 on one H100-SXM-80GB, the workflow paper's (Helium's) setting, for
    workflows at the paper's scale. Estimated like the 70B profile (see its ``notes``):
    prefill 30,000 tokens/s, decode 7 ms per step plus 0.05 ms per sequence, 352,000
    tokens of KV in 16-token blocks.

``"llama-3.1-8b-h100"``
    Llama-3.1-8B in BF16 on one H100-SXM-80GB, *measured*: derived from the public
    results of vLLM's own serving benchmark on that GPU (the source and the arithmetic
    are in its ``notes``): 7.0 ms a step plus 0.022 ms a sequence, 40,000 prefill tokens
    a second, 423,000 tokens of KV. Those runs confirm the Qwen3-8B estimate's step (7.3
    ms at 1 to 8 sequences on the same GPU, GPUStack's published sweep) and find the 70B
    estimate pessimistic (17-19 ms a step on 4 H100s).
"""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.engine.cost_model import CostModel
from kalypso.engine.protocol import EngineCapacity

CALIBRATION_NOTE = "measured one request at a time on 2026-11-29"

GENERIC_CAPACITY = EngineCapacity(num_blocks=1024, block_size_tokens=16, max_model_len_tokens=8192)
"""Default capacity of an ad-hoc profile (SimEngine's arguments override it)."""


@dataclass(frozen=True)
class CostProfile:
    """Virtual-clock step costs of one model on one machine, and its default capacity.

    Attributes:
        name: short name, used in the engine name ("sim:<name>").
        per_step_s: fixed cost of every step that computes anything.
        per_prefill_token_s: cost of each prompt token computed (not served from cache).
        per_decode_token_s: cost of each request generating one token in the step.
        notes: where the numbers come from and how trustworthy they are.
        capacity: KV blocks, block size and context the engine defaults to.
    """

    name: str
    per_step_s: float
    per_prefill_token_s: float
    per_decode_token_s: float
    notes: str = ""
    capacity: EngineCapacity = GENERIC_CAPACITY

    def __post_init__(self) -> None:
        costs = (self.per_step_s, self.per_prefill_token_s, self.per_decode_token_s)
        if min(costs) < 0:
            raise ValueError(f"profile {self.name!r}: costs must be >= 0, got {costs}")

    def cost_model(self, max_step_tokens: int | None, max_seqs: int | None) -> CostModel:
        """The profile's step costs for an engine with these batch limits."""
        return CostModel(
            self.per_step_s,
            self.per_prefill_token_s,
            self.per_decode_token_s,
            max_step_tokens=max_step_tokens,
            max_seqs=max_seqs,
            source=f"profile {self.name}",
        )

    def step_time_s(self, prefill_tokens: int, decode_seqs: int) -> float:
        """Duration of one step computing ``prefill_tokens`` prompt tokens and one token
        for each of ``decode_seqs`` decoding requests."""
        return self.cost_model(None, None).step_time_s(prefill_tokens, decode_seqs)


SMOLLM2_CPU = CostProfile(
    name="smollm2-cpu",
    per_step_s=0.0,
    per_prefill_token_s=0.00093,
    per_decode_token_s=0.0159,
    notes=(
        f"SmolLM2-135M on vLLM CPU, 2 cores; step costs are {CALIBRATION_NOTE}."
        " Capacity: 256 MiB of KV cache at 23,040 bytes per token in 128-token blocks."
    ),
    capacity=EngineCapacity(num_blocks=91, block_size_tokens=128, max_model_len_tokens=8192),
)

SMOLLM2_CPU_F32 = CostProfile(
    name="smollm2-cpu-f32",
    per_step_s=0.0683,
    per_prefill_token_s=0.00579,
    per_decode_token_s=0.0034,
    notes=(
        "SmolLM2-135M on vLLM CPU in float32, 2 cores without AVX-512; measured with"
        " `kalypso engine calibrate --full --deterministic` on 2026-12-01, decode"
        " at batches of 1-8. Capacity: 256 MiB at 46,080 bytes per token, 128-token blocks."
    ),
    capacity=EngineCapacity(num_blocks=45, block_size_tokens=128, max_model_len_tokens=8192),
)

LLAMA_3_3_70B_4XGPU = CostProfile(
    name="llama-3.3-70b-4xgpu",
    per_step_s=0.022,
    per_prefill_token_s=1 / 12_000,
    per_decode_token_s=0.00015,
    notes=(
        "Llama-3.3-70B BF16 on 4x H100-SXM-80GB, TP 4: estimated, not measured."
        " Prefill 12,000 tokens/s (141 GFLOP/token at ~40% of 3,956 TFLOP/s);"
        " decode 22 ms per step + 0.15 ms per sequence (35 GB weight shard per GPU at"
        " ~70% of 3.35 TB/s plus all-reduces); KV 28,000 blocks x 16 tokens from"
        " ~34.7 GiB per GPU at 80 KiB per token per GPU (BF16 KV, memory utilisation 0.9)."
    ),
    capacity=EngineCapacity(num_blocks=28_000, block_size_tokens=16, max_model_len_tokens=131_072),
)

QWEN3_8B_H100 = CostProfile(
    name="qwen3-8b-h100",
    per_step_s=0.007,
    per_prefill_token_s=1 / 30_000,
    per_decode_token_s=0.00005,
    notes=(
        "Qwen3-8B BF16 on one H100-SXM-80GB (the Helium paper's setting, section 7.1):"
        " estimated from public figures, not measured. Prefill 30,000 tokens/s (16.4"
        " GFLOP/token at ~50% of 989 TFLOP/s); decode 7 ms per step (16.4 GB of weights at"
        " ~70% of 3.35 TB/s) + 0.05 ms per sequence (KV reads); KV 22,000 blocks x 16"
        " tokens = 352,000 tokens from ~52 GB (0.9 x 80 GB minus 16.4 GB of weights and"
        " ~4 GB of activations) at 147 KiB per token (36 layers x 8 KV heads x 128 dims x"
        " 2 x 2 bytes). Context: the model's 32,768 tokens."
    ),
    capacity=EngineCapacity(num_blocks=22_000, block_size_tokens=16, max_model_len_tokens=32_768),
)

LLAMA_3_1_8B_H100 = CostProfile(
    name="llama-3.1-8b-h100",
    per_step_s=0.0070,
    per_prefill_token_s=0.000025,
    per_decode_token_s=0.000022,
    notes=(
        "Llama-3-8B-Instruct BF16 (the architecture of Llama-3.1-8B) on one H100-80GB SXM,"
        " measured by vLLM's serving benchmark (vLLM 0.6.0, ShareGPT, all requests at once,"
        " 10 scheduler steps per token interval) in LambdaLabsML/vllm-benchmark at"
        " a4f9f4371a1c, results/prompt_{10,80,320}/1xH100-80GB-SXM/"
        "Meta-Llama-3-8B-Instruct_tp1_len2048.json: token intervals of 70.3-71.2 ms with"
        " 1-2 sequences running (7.0 ms a step), 83-90 ms with about 80 and 125-134 ms with"
        " about 256 (median 126.36 ms): 7.0 ms + 0.022 ms a sequence at ShareGPT's short"
        " contexts; first-token times rising 48-50 ms per 2,048-token prefill step of"
        " prompt_320 (65,578 prompt tokens): 25 us a prefill token. KV cache: 51.63 GiB"
        " available at memory utilisation 0.9 (vLLM issue #19996, this model and GPU) at"
        " 128 KiB a token, 423,000 tokens: 26,400 blocks of 16. Context: 131,072."
    ),
    capacity=EngineCapacity(num_blocks=26_400, block_size_tokens=16, max_model_len_tokens=131_072),
)

PROFILES: dict[str, CostProfile] = {
    p.name: p
    for p in (SMOLLM2_CPU, SMOLLM2_CPU_F32, LLAMA_3_3_70B_4XGPU, QWEN3_8B_H100, LLAMA_3_1_8B_H100)
}


def get_profile(name: str) -> CostProfile:
    """The registered profile called ``name``; KeyError lists the known names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown cost profile {name!r}; known: {sorted(PROFILES)}") from None
