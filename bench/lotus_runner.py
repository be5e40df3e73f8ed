"""Run a workload shape with the real Lotus library against a running vLLM server.

This script runs in Lotus's own virtual environment (``make lotus-venv``; Lotus pins
numpy<2 and pandas<3), not Kalypso's. It reads a job file written by ``python -m bench``
(workload name, the tables, server URL and model) and writes one JSON record: time,
LLM calls and the server's prompt and prefix-cache-hit token counters over the run.
Output caps are Kalypso's: 8 tokens for predicates, each map's own cap.

    .venv-lotus/bin/python bench/lotus_runner.py JOB.json OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# litellm (under Lotus) otherwise fetches a price list from the network at import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import lotus
import pandas as pd
from lotus.models import LM
from server_counters import counters, run_record  # beside this script

PREDICATE_MAX_TOKENS = 8
"""Kalypso's bound for predicate answers (the paper's configuration)."""


def use_lm(job: dict, max_tokens: int) -> None:
    """Point Lotus at the job's server and model, with the output cap Kalypso's plan uses
    for the operator that comes next (Lotus takes one cap per LM, not per operator)."""
    lm = LM(
        model=f"hosted_vllm/{job['model']}", api_base=f"{job['base_url']}/v1",
        temperature=0.0, max_tokens=max_tokens, max_batch_size=64,
    )  # fmt: skip
    lotus.settings.configure(lm=lm)


def run(job: dict) -> pd.DataFrame:
    """The workload with Lotus's operators. Kalypso's plans ask negated questions ("is
    it unrelated to ...?", kept on "no") because, under Kalypso's prompt, the 135M model
    answers "No" to nearly everything. Under Lotus's prompt the same model mostly answers
    in prose, which Lotus reads as True; asked negated questions, Lotus then dropped every
    contract. So Lotus asks the positive question, which keeps what the paper's workloads
    keep (all NDAs, the pairs to explain)."""
    tables = {name: pd.DataFrame(rows) for name, rows in job["tables"].items()}
    use_lm(job, PREDICATE_MAX_TOKENS)
    if job["workload"] == "medec":
        notes = tables["notes"].sem_filter("Does this clinical {text} contain a medical error?")
        use_lm(job, 16)
        notes = notes.sem_map(
            "Which sentence of the {text} contains the error? Give its number.",
            suffix="error_sentence",
        )
        use_lm(job, 48)
        return notes.sem_map(
            "Rewrite the wrong sentence of the {text} correctly.", suffix="correction"
        )
    if job["workload"] == "contractnli":
        contracts = tables["contracts"].sem_filter(
            "Is this {text} about confidentiality obligations?"
        )
        joined = contracts.sem_join(
            tables["hypotheses"], "Does the contract {text:left} address: {hypothesis:right}"
        )
        if len(joined) == 0:
            return joined
        use_lm(job, 48)
        return joined.sem_map(
            "Quote the clause of the {text} that addresses: {hypothesis}", suffix="evidence"
        )
    raise SystemExit(f"unknown workload {job['workload']!r}")


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    before = counters(job["base_url"])
    started = time.monotonic()
    result = run(job)
    elapsed_s = time.monotonic() - started
    after = counters(job["base_url"])
    record = run_record(before, after, elapsed_s, len(result))
    Path(sys.argv[2]).write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
