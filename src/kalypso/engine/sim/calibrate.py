"""Calibrate a simulator cost profile from measured requests on a real engine.

The simulator charges ``per_step_s + prefill_tokens * per_prefill_token_s +
decode_seqs * per_decode_token_s`` per step. Two series, run on an engine with an empty
prefix cache, pin the three numbers down:

* prefill: single prompts of several lengths with ``max_tokens=1`` take
  ``per_step_s + n * per_prefill_token_s`` (one step, the prompt fits the step budget);
  a least-squares line gives the per-token cost;
* decode: ``B`` short prompts submitted together, each generating ``m`` tokens
  (``ignore_eos``), finish after their prefill plus ``m - 1`` steps of
  ``per_step_s + B * per_decode_token_s``. The difference between two lengths ``m``
  cancels the prefill and gives one decode step's time at batch ``B``; a line through
  the batches ``DECODE_BATCHES`` gives the per-step intercept and the per-sequence cost.

Single requests alone cannot separate the per-step cost from the per-sequence cost, and
the split decides whether batching pays: on CPU a decode step of 8 sequences costs far
less than 8 steps of one.

Run it with ``python -m kalypso.engine.sim.calibrate [--deterministic]`` (starts
in-process vLLM with the bundled model; ``--deterministic`` measures float32) and paste
the printed profile into ``costs.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
from dataclasses import dataclass

from kalypso.engine.batch import generate_all
from kalypso.engine.protocol import Engine, GenerateRequest

PREFILL_LENGTHS_TOKENS = (128, 384, 768, 1152, 1536)
DECODE_LENGTHS_TOKENS = (16, 64)
DECODE_BATCHES = (1, 2, 4, 8)
"""Sequences decoding together in the decode series: the engine needs ``max_num_seqs``
of at least the largest."""
REPEATS = 3


@dataclass(frozen=True)
class Calibration:
    per_step_s: float
    per_prefill_token_s: float
    per_decode_token_s: float
    prefill_points: tuple[tuple[int, float], ...]
    """(prompt tokens, seconds) of each single prefill."""
    decode_step_points: tuple[tuple[int, float], ...]
    """(sequences in the batch, seconds per decode step) of each repeat."""


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``; returns ``(a, b)``."""
    slope, intercept = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
    return intercept, slope


def _prompt(start: int, length: int) -> tuple[int, ...]:
    return tuple(start + (i * 31) % 20000 for i in range(length))


async def _batch_time_s(engine: Engine, name: str, prompts: list[tuple[int, ...]], m: int) -> float:
    """Seconds from submitting ``prompts`` together until the last of them has generated
    ``m`` tokens."""
    requests = [
        GenerateRequest(f"{name}-{i}", prompt, m, ignore_eos=True)
        for i, prompt in enumerate(prompts)
    ]
    results = await generate_all(engine, requests)
    return max(r.timings.total_s for r in results)


async def calibrate(engine: Engine, *, vocab_offset: int = 1000) -> Calibration:
    """Measure ``engine`` (its ``max_num_seqs`` at least ``max(DECODE_BATCHES)``); every
    prompt is new (no prefix hits)."""
    ids = itertools.count()
    prefill: list[tuple[float, float]] = []
    for length, repeat in itertools.product(PREFILL_LENGTHS_TOKENS, range(REPEATS)):
        await engine.reset_prefix_cache()
        prompt = _prompt(vocab_offset + 7 * next(ids), length)
        result = await engine.generate(GenerateRequest(f"prefill-{length}-{repeat}", prompt, 1))
        prefill.append((float(length), result.timings.total_s))
    _, per_prefill_token_s = _fit_line(prefill)
    short, long = min(DECODE_LENGTHS_TOKENS), max(DECODE_LENGTHS_TOKENS)
    steps: list[tuple[float, float]] = []
    for batch, repeat in itertools.product(DECODE_BATCHES, range(REPEATS)):
        times_s = {}
        for m in (short, long):
            await engine.reset_prefix_cache()
            prompts = [_prompt(vocab_offset + 7 * next(ids), 64) for _ in range(batch)]
            times_s[m] = await _batch_time_s(engine, f"decode-{batch}-{m}-{repeat}", prompts, m)
        steps.append((float(batch), (times_s[long] - times_s[short]) / (long - short)))
    per_step_s, per_decode_token_s = _fit_line(steps)
    return Calibration(
        per_step_s=max(per_step_s, 0.0),
        per_prefill_token_s=max(per_prefill_token_s, 0.0),
        per_decode_token_s=max(per_decode_token_s, 0.0),
        prefill_points=tuple((int(n), t) for n, t in prefill),
        decode_step_points=tuple((int(b), t) for b, t in steps),
    )


async def _main(deterministic: bool) -> None:
    from kalypso.engine.vllm_local import LocalVLLMEngine
    from kalypso.engine.vllm_settings import VLLMSettings

    settings = VLLMSettings(max_num_seqs=max(DECODE_BATCHES), deterministic=deterministic)
    engine = await LocalVLLMEngine.start(settings)
    try:
        result = await calibrate(engine)
    finally:
        await engine.close()
    print(f"per_step_s={result.per_step_s:.6f}")
    print(f"per_prefill_token_s={result.per_prefill_token_s:.8f}")
    print(f"per_decode_token_s={result.per_decode_token_s:.6f}")
    print(f"prefill points (tokens, s): {result.prefill_points}")
    print(f"decode step points (sequences, s per step): {result.decode_step_points}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deterministic", action="store_true", help="measure float32")
    asyncio.run(_main(parser.parse_args().deterministic))
