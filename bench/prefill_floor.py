"""The prefill floor: the least time a run could take on an engine, from prefill alone.

A run must compute at least its minimum prefill (each distinct full-block prefix once).
:func:`peak_prefill_rate_tokens_per_s` measures how fast the engine prefills when it is
given nothing else to do, and ``min_prefill_tokens / rate`` is then an estimate of the
floor no schedule can go below: decoding and any prefill beyond the minimum only add to
it. The ratio of the baseline's time to adaptive's floor is the best speed-up adaptive
could reach on this engine; a target above it cannot be met by scheduling.

It is an estimate, not a proof: the calibration prompts are the workload's own texts, at
most :data:`LONGEST_PROMPT_TOKENS` long, and a prompt's tokens cost more the further they
sit from its start (attention). A run whose prompts are much longer prefills slower than
the peak, by much on a small model: on ContractNLI on an AVX2 host, adaptive's least
prefill time with attention counted (``bench.engine_steps``' fit) was 1.6 times this
floor (BENCHMARKS.md, *Where ContractNLI's time goes, step by step*).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from bench.clock import engine_clock_s
from kalypso.engine.batch import generate_all
from kalypso.engine.protocol import Engine, GenerateRequest

logger = logging.getLogger(__name__)

CALIBRATION_TOKENS = 6144
"""Prompt tokens the calibration prefills: three of vLLM's default 2,048-token steps."""
LONGEST_PROMPT_TOKENS = 1024


def calibration_prompts(
    engine: Engine, texts: Sequence[str], total_tokens: int = CALIBRATION_TOKENS
) -> list[tuple[int, ...]]:
    """Prompts of ``total_tokens`` tokens in all, cut from ``texts`` (repeated as needed),
    each at most a quarter of the KV cache and :data:`LONGEST_PROMPT_TOKENS` long. Each
    starts with its own number, so no two share a cached block.

    Raises:
        ValueError: ``texts`` holds no tokens, or ``total_tokens`` is not positive.
    """
    if total_tokens < 1:
        raise ValueError(f"total_tokens must be positive, got {total_tokens}")
    stream = [t for text in texts for t in engine.tokenizer.encode(text)]
    if not stream:
        raise ValueError("the calibration texts hold no tokens")
    capacity = engine.capacity
    length = max(
        2,
        min(LONGEST_PROMPT_TOKENS, capacity.total_tokens // 4, capacity.max_model_len_tokens - 2),
    )
    prompts: list[tuple[int, ...]] = []
    offset = 0
    for index in range(math.ceil(total_tokens / length)):
        head = engine.tokenizer.encode(f"{index}: ")
        body_tokens = length - len(head)
        body = [stream[(offset + i) % len(stream)] for i in range(body_tokens)]
        offset += body_tokens
        prompts.append(tuple(head + body))
    return prompts


async def peak_prefill_rate_tokens_per_s(engine: Engine, texts: Sequence[str]) -> float:
    """Prompt tokens per second the engine prefills with every calibration prompt sent at
    once, one output token each, from an empty prefix cache (reset before and after), on
    the engine's clock (virtual seconds on the simulator).

    Raises:
        ValueError: as :func:`calibration_prompts`.
        EngineError: a request failed (the others are cancelled first).
    """
    prompts = calibration_prompts(engine, texts)
    await engine.reset_prefix_cache()
    started_s = engine_clock_s(engine)
    # generate_all, not gather: when one request fails the others are cancelled, so none
    # is left running into the timed runs
    results = await generate_all(
        engine,
        [
            GenerateRequest(f"prefill-floor:{index}", prompt, max_tokens=1)
            for index, prompt in enumerate(prompts)
        ],
    )
    elapsed_s = engine_clock_s(engine) - started_s
    await engine.reset_prefix_cache()
    computed = sum(r.prompt_tokens - r.cached_tokens for r in results)
    rate = computed / elapsed_s if elapsed_s > 0 else math.inf
    logger.info("peak prefill: %d tokens in %.2f s (%.0f tokens/s)", computed, elapsed_s, rate)
    return rate
