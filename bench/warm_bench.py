"""Proactive warming of ``cacheable`` calls, measured: Reflect with its critics marked
``cacheable`` (each query's document and question warmed before the analysis they also
read exists) against plain Reflect, side by side on one engine, the prefix cache reset
before each run, each pair repeated with the order turned::

    python -m bench.warm_bench --engine sim                       # 44 and 88 blocks
    python -m bench.warm_bench --engine http --deterministic --repeats 2 \\
        --out bench/results/workflows-warm.json

The library's workflows warm nothing otherwise: no static prefix reaches 64 tokens
(docs/benchmarks.md), so this is the one measurement of warming that fires.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from bench.clock import engine_clock_s
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import Engine
from kalypso.engine.vllm_settings import VLLMSettings
from kalypso.workflow.library.workflows import SMALL, reflect
from kalypso.workflow.run import arun


async def _run(engine: Engine, warm_critics: bool) -> dict[str, object]:
    job = reflect(SMALL["reflect"], warm_critics=warm_critics)
    await engine.reset_prefix_cache()
    started = engine_clock_s(engine)
    result = await arun(job.workflows[0], engine, job.inputs[0], system_prompt="")
    assert result.warm is not None
    return {
        "system": "warm critics" if warm_critics else "plain",
        "time_s": round(engine_clock_s(engine) - started, 3),
        "prefill_tokens": result.prefill_tokens,
        "min_prefill_tokens": result.min_prefill_tokens,
        "warmed_prefixes": result.warm.prefixes,
        "warmed_tokens": result.warm.tokens,
        "outputs": result.outputs["answer"].tolist(),
    }


async def _bench(spec: EngineSpec, repeats: int) -> list[dict[str, object]]:
    engine = await open_engine(spec)
    records: list[dict[str, object]] = []
    try:
        if spec.kind != "sim":
            await _run(engine, False)  # untimed: a fresh engine's first run costs more
        for repeat in range(repeats):
            order = (False, True) if repeat % 2 == 0 else (True, False)
            for warm_critics in order:
                record = {**await _run(engine, warm_critics), "repeat": repeat}
                records.append(record)
                print(
                    f"  repeat {repeat} {record['system']:12s} {record['time_s']:7.2f} s"
                    f"  prefill {record['prefill_tokens']} (min {record['min_prefill_tokens']})"
                    f"  warmed {record['warmed_prefixes']} ({record['warmed_tokens']} tokens)",
                    flush=True,
                )
    finally:
        await engine.close()
    plain = [r for r in records if r["system"] == "plain"]
    assert all(r["outputs"] == plain[0]["outputs"] for r in records), "outputs differ"
    print("  outputs equal in every run")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sim", "http"), default="sim")
    parser.add_argument("--deterministic", action="store_true", help="float32 (same answers)")
    parser.add_argument("--kv-cache-bytes", type=int, default=64 * 2**20)
    parser.add_argument("--sim-blocks", default="44,88", help="simulator: KV blocks per run")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    records: list[dict[str, object]] = []
    if args.engine == "sim":
        for blocks in (int(b) for b in args.sim_blocks.split(",")):
            print(f"simulator, {blocks} blocks of 32 tokens, 16 sequences")
            spec = EngineSpec(
                kind="sim",
                sim_profile="smollm2-cpu-f32",
                sim_blocks=blocks,
                sim_block_size_tokens=32,
                sim_max_num_seqs=16,
            )
            found = asyncio.run(_bench(spec, args.repeats))
            records += [{**r, "kv_blocks": blocks} for r in found]
    else:
        settings = VLLMSettings(
            kv_cache_bytes=args.kv_cache_bytes,
            block_size_tokens=32,
            max_num_seqs=16,
            deterministic=args.deterministic,
        )
        print(f"vLLM server, {args.kv_cache_bytes} bytes of KV cache in blocks of 32 tokens")
        records = asyncio.run(_bench(EngineSpec(kind="http", settings=settings), args.repeats))
    if args.out is not None:
        args.out.write_text(json.dumps(records, indent=1))
        print(f"wrote {len(records)} records to {args.out}")


if __name__ == "__main__":
    main()
