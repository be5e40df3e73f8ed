"""The Lotus drop-in, side by side: one Lotus program (``bench/external/lotus_program.py``,
the ContractNLI chain: sem_filter, sem_join with the hypotheses, sem_map quoting the
clause) run by Lotus 1.2.4 in its venv and by ``kalypso.pandas`` in Kalypso's, against
the same vLLM server, with only the import and the configuration line changed.

The server's prefix cache is reset before each run; the systems alternate, each run
``--repeats`` times, on a float32 server (the deterministic mode, as the other real-vLLM
benchmarks) and then a bf16 one. Reported per run: the program's time (after its configuration
line), prompt, cached and computed (prefill) tokens and calls from the server's counters,
and the rows the program gave (pairs and distinct contracts kept). The two libraries
prompt differently, so their rows differ; both are reported.

    make lotus-venv
    make bench-lotus      # python -m bench.lotus_dropin --out bench/results/lotus-dropin-...json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.external_run import runner_env
from bench.stamp import run_stamp
from bench.workloads import contractnli
from kalypso.engine.vllm_server import VLLMServer
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.models import resolve_model

PROGRAM = Path(__file__).resolve().parent / "external" / "lotus_program.py"
SERVED_NAME = "bench-model"


def run_program(python: str, library: str, job: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The program under ``library`` (``lotus`` or ``kalypso``) with ``python``; its record."""
    job_path, out_path = folder / "job.json", folder / f"{library}.json"
    job_path.write_text(json.dumps(job, default=str))
    done = subprocess.run(
        [python, str(PROGRAM), "--library", library, str(job_path), str(out_path)],
        capture_output=True,
        text=True,
        env=runner_env(),
    )
    if done.returncode != 0:
        raise SystemExit(f"{library} failed:\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(out_path.read_text())
    return record


def run_on_server(
    args: argparse.Namespace, deterministic: bool, tables: dict[str, Any]
) -> list[dict[str, Any]]:
    """Both libraries, alternating, ``args.repeats`` times each, on one server started
    here (float32 when ``deterministic``, else bf16); the records."""
    model = resolve_model()
    dtype = "float32" if deterministic else "bfloat16"
    per_token = kv_bytes_per_token(model, dtype) or 23_040
    settings = VLLMSettings(
        kv_cache_bytes=args.kv_tokens * per_token,
        max_num_seqs=16,
        block_size_tokens=32,
        deterministic=deterministic,
    )
    stamp = run_stamp()
    workload = (
        f"contractnli chain, {len(tables['contracts'])} contracts x"
        f" {len(tables['hypotheses'])} hypotheses"
    )
    engine = f"vLLM CPU server, {dtype}, {args.kv_tokens:,} KV tokens"
    pythons = {"lotus": args.lotus_python, "kalypso": sys.executable}
    records: list[dict[str, Any]] = []
    server = VLLMServer.start(settings, served_model_name=SERVED_NAME, admin_endpoints=True)
    try:
        job = {
            "tables": tables,
            "base_url": server.base_url,
            "model": SERVED_NAME,
            "max_tokens": args.max_tokens,
        }
        with tempfile.TemporaryDirectory() as folder:
            for repeat in range(args.repeats):
                for library in ("lotus", "kalypso"):
                    reset = httpx.post(f"{server.base_url}/reset_prefix_cache", timeout=60)
                    reset.raise_for_status()
                    record = run_program(pythons[library], library, job, Path(folder))
                    record.update(
                        library=library,
                        repeat=repeat,
                        workload=workload,
                        engine=engine,
                        prefill_tokens=record["prompt_tokens"] - record["cached_tokens"],
                        date=stamp.date,
                        commit=stamp.commit,
                        host=stamp.host,
                    )
                    records.append(record)
                    print(
                        f"{dtype} {library:8s} repeat {repeat}: {record['time_s']:7.1f} s,"
                        f" {record['llm_calls']:.0f} calls, {record['prompt_tokens']:,.0f} prompt"
                        f" tokens, {record['prefill_tokens']:,.0f} computed,"
                        f" {record['output_rows']} rows from {record['contracts_kept']} contracts",
                        flush=True,
                    )
    finally:
        server.stop()
    for repeat in range(args.repeats):
        lotus, mine = (
            next(r for r in records if r["repeat"] == repeat and r["library"] == name)
            for name in ("lotus", "kalypso")
        )
        ratio = lotus["time_s"] / mine["time_s"]
        print(f"{dtype} repeat {repeat}: kalypso.pandas {ratio:.2f}x Lotus", flush=True)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contracts", type=int, default=5)
    parser.add_argument(
        "--kv-tokens",
        type=int,
        default=6144,
        help="the server's KV cache in tokens (default: two contracts with their prompts,"
        " as the relational bench sizes it)",
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="each answer's cap")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--dtypes",
        default="float32,bfloat16",
        help="the servers to run on, one after the other (float32 is the deterministic mode)",
    )
    parser.add_argument("--lotus-python", default=".venv-lotus/bin/python")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not Path(args.lotus_python).exists():
        raise SystemExit(f"{args.lotus_python} not found: run `make lotus-venv` first")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or set(dtypes) - {"float32", "bfloat16"}:
        raise SystemExit(f"--dtypes: float32 and/or bfloat16, got {args.dtypes!r}")
    tables = contractnli("quick", n=args.contracts).tables
    for dtype in dtypes:
        records = run_on_server(args, dtype == "float32", tables)
        previous = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps([*previous, *records], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
