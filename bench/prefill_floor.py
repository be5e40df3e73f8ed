"""The prefill floor: the least time a run could take on an engine, from prefill alone.

A run must compute at least its minimum prefill: each distinct full-block prefix once
(``min_prefill_tokens``), whose attention computes ``min_attention_pairs`` query-key pairs.
:func:`measure_prefill_cost` prices both on the engine, when it is given nothing else to
do, and :meth:`PrefillCost.floor_s` is then an estimate of the floor no schedule can go
below: decoding and any prefill beyond the minimum only add to it. The ratio of the
baseline's time to adaptive's floor is the best speed-up adaptive could reach on this
engine; a target above it cannot be met by scheduling.

Why attention is priced apart: a prompt's tokens cost more the further they sit from its
start. On ContractNLI on an AVX2 host, a token after the cached 2,000-token contract cost
about twice one at the start of its prompt, and a floor priced by tokens alone understated
adaptive's least prefill time by 38% (BENCHMARKS.md, *Where ContractNLI's time goes, step
by step*). So the calibration prefills the same number of tokens twice: once as short
prompts from an empty cache, once as suffixes after a long cached context. The two
batches differ only in their attention pairs, and the two times give a cost per token and
a cost per pair.

It is an estimate, not a proof: the engine's steps are not exactly linear in tokens and
pairs, its fixed cost per step is folded into the token cost at a full batch, and the
decode steps a run needs are not counted at all (``bench.step_probe --decode-step``
measures them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.clock import engine_clock_s
from kalypso.engine.attention import attention_pairs
from kalypso.engine.batch import generate_all
from kalypso.engine.protocol import Engine, GenerateRequest

logger = logging.getLogger(__name__)

CALIBRATION_TOKENS = 6144
"""Prompt tokens the calibration prefills: three of vLLM's default 2,048-token steps."""
LONGEST_PROMPT_TOKENS = 1024
"""Longest calibration prompt, and longest suffix after the context."""
CONTEXT_TOKENS = 2048
"""Longest cached context the second batch's prompts follow (at most half the KV cache)."""


def calibration_prompts(
    engine: Engine, texts: Sequence[str], total_tokens: int = CALIBRATION_TOKENS
) -> list[tuple[int, ...]]:
    """Prompts of ``total_tokens`` tokens in all, cut from ``texts`` (repeated as needed),
    each at most a quarter of the KV cache and :data:`LONGEST_PROMPT_TOKENS` long. Each
    starts with its own number, so no two share a cached block.

    Raises:
        ValueError: ``texts`` holds no tokens, or ``total_tokens`` is not positive.
    """
    return _numbered_prompts(engine, _token_stream(engine, texts), total_tokens)


def context_calibration_prompts(
    engine: Engine, texts: Sequence[str], total_tokens: int = CALIBRATION_TOKENS
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """``(context, prompts)``: a context of whole blocks, at most :data:`CONTEXT_TOKENS`
    and half the KV cache long, and prompts that each start with it and go on with
    their own numbered text of :func:`calibration_prompts`' length, ``total_tokens``
    tokens after the context in all. The context is empty when the cache or the model
    length leaves no whole block for it.

    Raises:
        ValueError: as :func:`calibration_prompts`.
    """
    stream = _token_stream(engine, texts)
    prompts = _numbered_prompts(engine, stream, total_tokens)
    capacity = engine.capacity
    block = capacity.block_size_tokens
    context_tokens = min(
        CONTEXT_TOKENS,
        capacity.total_tokens // 2,
        capacity.max_model_len_tokens - max(map(len, prompts)) - 2,
    )
    context_tokens = max(0, context_tokens // block * block)
    if context_tokens == 0:
        return (), prompts
    head = engine.tokenizer.encode("context: ")
    # the context starts where the suffixes' text does not, so it reads as other text
    start = len(stream) // 2
    body = [stream[(start + i) % len(stream)] for i in range(context_tokens - len(head))]
    context = tuple(head + body)
    return context, [context + prompt for prompt in prompts]


def _token_stream(engine: Engine, texts: Sequence[str]) -> list[int]:
    stream = [t for text in texts for t in engine.tokenizer.encode(text)]
    if not stream:
        raise ValueError("the calibration texts hold no tokens")
    return stream


def _numbered_prompts(
    engine: Engine, stream: Sequence[int], total_tokens: int
) -> list[tuple[int, ...]]:
    """Prompts of :func:`calibration_prompts`' length, ``total_tokens`` in all, cut from
    ``stream`` in order, each starting with its own number."""
    if total_tokens < 1:
        raise ValueError(f"total_tokens must be positive, got {total_tokens}")
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
        prompts.append(
            tuple(head + [stream[(offset + i) % len(stream)] for i in range(body_tokens)])
        )
        offset += body_tokens
    return prompts


@dataclass(frozen=True)
class BatchTiming:
    """One calibration batch: what it computed and how long it took."""

    computed_tokens: int
    attention_pairs: int
    elapsed_s: float


@dataclass(frozen=True)
class PrefillCost:
    """An engine's prefill cost: seconds per computed prompt token (the steps' fixed cost
    included, at a full batch) and per attention pair, fitted from two batches of equal
    tokens and unequal pairs (:func:`measure_prefill_cost`)."""

    token_s: float
    pair_s: float
    short: BatchTiming
    """The batch of short prompts from an empty cache."""
    after_context: BatchTiming | None
    """The batch after a cached context; None when there was no room for one (then
    ``pair_s`` is 0 and ``token_s`` the short batch's)."""

    def floor_s(self, prefill_tokens: int, pairs: int) -> float:
        """Least seconds to compute ``prefill_tokens`` tokens whose attention computes
        ``pairs`` pairs."""
        return prefill_tokens * self.token_s + pairs * self.pair_s

    @property
    def peak_rate_tokens_per_s(self) -> float:
        """The short batch's prefill rate (tokens per second)."""
        t = self.short
        return t.computed_tokens / t.elapsed_s if t.elapsed_s > 0 else math.inf

    def explain(self) -> str:
        """One line: the fitted costs and the batches they come from."""
        line = (
            f"prefill cost: {self.token_s * 1e3:.2f} ms a token +"
            f" {self.pair_s * 1e6:.2f} s per million attention pairs"
            f" (short prompts: {self.short.computed_tokens:,} tokens,"
            f" {self.short.attention_pairs / 1e6:.1f}M pairs, {self.short.elapsed_s:.2f} s"
        )
        if self.after_context is None:
            return line + "; no room for a context, so attention is not priced)"
        t = self.after_context
        return (
            line + f"; after a context: {t.computed_tokens:,} tokens,"
            f" {t.attention_pairs / 1e6:.1f}M pairs, {t.elapsed_s:.2f} s)"
        )


def fit_prefill_cost(short: BatchTiming, after_context: BatchTiming | None) -> PrefillCost:
    """Solve ``elapsed = tokens * token_s + pairs * pair_s`` for the two batches. When the
    batches cannot separate the two costs (no context batch, equal pairs, or noise that
    makes one cost negative), attention is left unpriced and ``token_s`` is the short
    batch's; the floor is then the token-only floor, which is still a lower estimate.

    Raises:
        ValueError: the short batch computed no tokens.
    """
    if short.computed_tokens < 1:
        raise ValueError("the calibration computed no tokens")
    token_only = PrefillCost(short.elapsed_s / short.computed_tokens, 0.0, short, after_context)
    if after_context is None:
        return token_only
    a, b = short, after_context
    det = a.computed_tokens * b.attention_pairs - b.computed_tokens * a.attention_pairs
    if det <= 0:
        return token_only
    pair_s = (a.computed_tokens * b.elapsed_s - b.computed_tokens * a.elapsed_s) / det
    token_s = (a.elapsed_s - a.attention_pairs * pair_s) / a.computed_tokens
    if pair_s <= 0 or token_s <= 0:
        if pair_s != 0:  # exactly 0 on an engine whose cost has no attention term
            logger.warning(
                "prefill calibration: the context batch did not cost more per token (%.2f s"
                " against %.2f s); attention left unpriced",
                b.elapsed_s,
                a.elapsed_s,
            )
        return token_only
    return PrefillCost(token_s, pair_s, short, after_context)


async def _timed_batch(engine: Engine, prompts: Sequence[tuple[int, ...]], tag: str) -> BatchTiming:
    started_s = engine_clock_s(engine)
    # generate_all, not gather: when one request fails the others are cancelled, so none
    # is left running into the timed runs
    results = await generate_all(
        engine,
        [
            GenerateRequest(f"prefill-floor:{tag}{index}", prompt, max_tokens=1)
            for index, prompt in enumerate(prompts)
        ],
    )
    elapsed_s = engine_clock_s(engine) - started_s
    computed = [r.prompt_tokens - r.cached_tokens for r in results]
    pairs = sum(attention_pairs(c, r.cached_tokens) for c, r in zip(computed, results, strict=True))
    return BatchTiming(sum(computed), pairs, elapsed_s)


async def measure_prefill_cost(engine: Engine, texts: Sequence[str]) -> PrefillCost:
    """Price prefill on ``engine`` (:class:`PrefillCost`) from two batches, each sent at
    once with one output token a prompt, on the engine's clock (virtual seconds on the
    simulator): :func:`calibration_prompts` from an empty prefix cache, then the same
    tokens after a cached context (:func:`context_calibration_prompts`; the context's own
    prefill is not timed). The prefix cache is reset before, between and after, so nothing
    is left cached for the timed runs.

    Raises:
        ValueError: as :func:`calibration_prompts`.
        EngineError: a request failed (the others are cancelled first).
    """
    context, context_prompts = context_calibration_prompts(engine, texts)
    short_prompts = [prompt[len(context) :] for prompt in context_prompts]
    await engine.reset_prefix_cache()
    try:
        short = await _timed_batch(engine, short_prompts, "")
        after_context = None
        if context:
            await engine.reset_prefix_cache()
            await generate_all(
                engine, [GenerateRequest("prefill-floor:context", context, max_tokens=1)]
            )
            after_context = await _timed_batch(engine, context_prompts, "c")
    finally:
        await engine.reset_prefix_cache()
    cost = fit_prefill_cost(short, after_context)
    logger.info("%s", cost.explain())
    return cost
