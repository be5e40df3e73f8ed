"""Calibrate a simulator cost profile from measured requests on a real engine.

The simulator charges ``per_step_s + prefill_tokens * per_prefill_token_s +
decode_seqs * per_decode_token_s`` per step. Two series of single requests, run one at a
time on an engine with an empty prefix cache, pin the three numbers down:

* prefill: prompts of several lengths with ``max_tokens=1`` take
  ``per_step_s + n * per_prefill_token_s`` (one step, the prompt fits the step budget);
* decode: one short prompt generating ``m`` tokens (``ignore_eos``) takes its prefill
  plus ``m - 1`` steps of ``per_step_s + per_decode_token_s``.

A least-squares line through the prefill points gives the per-token cost and per-step
intercept; the decode slope minus the per-step cost gives the per-sequence decode cost.
Run it with ``python -m kalypso.engine.sim.calibrate`` (starts in-process vLLM with the
bundled model) and paste the printed profile into ``costs.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
from dataclasses import dataclass

from kalypso.engine.protocol import Engine, GenerateRequest

PREFILL_LENGTHS_TOKENS = (128, 384, 768, 1152, 1536)
DECODE_LENGTHS_TOKENS = (8, 32, 64)
REPEATS = 3


@dataclass(frozen=True)
class Calibration:
    per_step_s: float
    per_prefill_token_s: float
    per_decode_token_s: float
    prefill_points: tuple[tuple[int, float], ...]
    decode_points: tuple[tuple[int, float], ...]


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``; returns ``(a, b)``."""
    slope, intercept = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
    return intercept, slope


async def calibrate(engine: Engine, *, vocab_offset: int = 1000) -> Calibration:
    """Measure ``engine`` one request at a time; each prompt is new (no prefix hits)."""
    ids = itertools.count()
    prefill: list[tuple[float, float]] = []
    for length, repeat in itertools.product(PREFILL_LENGTHS_TOKENS, range(REPEATS)):
        await engine.reset_prefix_cache()
        start = vocab_offset + 7 * next(ids)
        prompt = tuple(start + (i * 31) % 20000 for i in range(length))
        result = await engine.generate(GenerateRequest(f"prefill-{length}-{repeat}", prompt, 1))
        prefill.append((float(length), result.timings.total_s))
    per_step_s, per_prefill_token_s = _fit_line(prefill)
    decode: list[tuple[float, float]] = []
    for steps, repeat in itertools.product(DECODE_LENGTHS_TOKENS, range(REPEATS)):
        await engine.reset_prefix_cache()
        start = vocab_offset + 7 * next(ids)
        prompt = tuple(start + (i * 31) % 20000 for i in range(64))
        request = GenerateRequest(f"decode-{steps}-{repeat}", prompt, steps, ignore_eos=True)
        result = await engine.generate(request)
        decode.append((float(steps), result.timings.total_s))
    _, per_decode_step_s = _fit_line(decode)
    return Calibration(
        per_step_s=max(per_step_s, 0.0),
        per_prefill_token_s=max(per_prefill_token_s, 0.0),
        per_decode_token_s=max(per_decode_step_s - max(per_step_s, 0.0), 0.0),
        prefill_points=tuple((int(n), t) for n, t in prefill),
        decode_points=tuple((int(n), t) for n, t in decode),
    )


async def _main() -> None:
    from kalypso.engine.vllm_local import LocalVLLMEngine
    from kalypso.engine.vllm_settings import VLLMSettings

    engine = await LocalVLLMEngine.start(VLLMSettings(max_num_seqs=1))
    try:
        result = await calibrate(engine)
    finally:
        await engine.close()
    print(f"per_step_s={result.per_step_s:.6f}")
    print(f"per_prefill_token_s={result.per_prefill_token_s:.8f}")
    print(f"per_decode_token_s={result.per_decode_token_s:.6f}")
    print(f"prefill points (tokens, s): {result.prefill_points}")
    print(f"decode points (tokens, s): {result.decode_points}")


if __name__ == "__main__":
    asyncio.run(_main())
