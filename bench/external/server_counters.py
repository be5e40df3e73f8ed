"""The vLLM server counters the external-library runners (``lotus_runner.py``,
``pz_runner.py``) record around a run. Standard library only: each runner imports this
file from its own directory, inside its library's venv."""

from __future__ import annotations

import urllib.request

WANTED = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:prefix_cache_hits_total": "cached_tokens",
    "vllm:request_success_total": "llm_calls",
    "vllm:generation_tokens_total": "output_tokens",
    "vllm:request_prefill_time_seconds_sum": "prefill_time_s",
    "vllm:request_decode_time_seconds_sum": "decode_time_s",
    "vllm:num_preemptions_total": "preemptions",
}


def counters(base_url: str) -> dict[str, float]:
    """Prompt tokens, prefix-cache-hit tokens and finished requests so far."""
    text = urllib.request.urlopen(f"{base_url}/metrics", timeout=30).read().decode()
    out = dict.fromkeys(WANTED.values(), 0.0)
    for line in text.splitlines():
        for metric, name in WANTED.items():
            if line.startswith((metric + "{", metric + " ")):
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


def run_record(
    before: dict[str, float],
    after: dict[str, float],
    elapsed_s: float,
    output_rows: int,
    **extra: object,
) -> dict[str, object]:
    """The record a runner writes: counter deltas, time, output rows and ``extra`` (the
    output rows' key columns for scoring, rows per operator)."""
    record: dict[str, object] = {k: after[k] - before[k] for k in after}
    record.update(time_s=round(elapsed_s, 3), output_rows=output_rows, **extra)
    return record
