"""Run a workload shape with the real Lotus library against a running vLLM server.

This script runs in Lotus's own virtual environment (``make lotus-venv``; Lotus pins
numpy<2 and pandas<3), not Kalypso's. It reads a job file written by ``python -m bench``
(workload name, the tables, server URL and model) and writes one JSON record: time,
LLM calls and the server's prompt and prefix-cache-hit token counters over the run.
Output caps are Kalypso's: 8 tokens for predicates, each map's own cap.

    .venv-lotus/bin/python bench/external/lotus_runner.py JOB.json OUT.json
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


class Stages:
    """Rows in and out of each operator, with the server's counters over it (where the
    prefill of each operator goes)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.stages: list[dict] = []

    def run(self, operator: str, rows_in: int, step) -> pd.DataFrame:
        before = counters(self.base_url)
        out = step()
        after = counters(self.base_url)
        stage = {"operator": operator, "rows_in": rows_in, "rows_out": len(out)}
        stage.update({k: after[k] - before[k] for k in after})
        stage["calls"] = stage.pop("llm_calls")
        self.stages.append(stage)
        return out


def run(job: dict, stages: Stages) -> pd.DataFrame:
    """The workload with Lotus's operators. Kalypso's plans ask negated questions ("is
    it unrelated to ...?", kept on "no") because, under Kalypso's prompt, the 135M model
    answers "No" to nearly everything. Under Lotus's prompt the same model mostly answers
    in prose, which Lotus reads as True; asked negated questions, Lotus then dropped every
    contract. So Lotus asks the positive question, which keeps what the paper's workloads
    keep (all NDAs, the pairs to explain)."""
    tables = {name: pd.DataFrame(rows) for name, rows in job["tables"].items()}
    use_lm(job, PREDICATE_MAX_TOKENS)
    if job["workload"] == "medec":
        notes = tables["notes"]
        flagged = "Does this clinical {text} contain a medical error?"
        notes = stages.run("sem_filter", len(notes), lambda: notes.sem_filter(flagged))
        use_lm(job, 16)
        which = "Which sentence of the {text} contains the error? Give its number."
        notes = stages.run(
            "sem_map", len(notes), lambda: notes.sem_map(which, suffix="error_sentence")
        )
        use_lm(job, 48)
        rewrite = "Rewrite the wrong sentence of the {text} correctly."
        return stages.run(
            "sem_map", len(notes), lambda: notes.sem_map(rewrite, suffix="correction")
        )
    if job["workload"] == "contractnli":
        contracts, hypotheses = tables["contracts"], tables["hypotheses"]
        about = "Is this {text} about confidentiality obligations?"
        contracts = stages.run("sem_filter", len(contracts), lambda: contracts.sem_filter(about))
        address = "Does the contract {text:left} address: {hypothesis:right}"
        pairs = len(contracts) * len(hypotheses)
        joined = stages.run("sem_join", pairs, lambda: contracts.sem_join(hypotheses, address))
        if len(joined) == 0:
            return joined
        use_lm(job, job.get("quote_tokens", 16))
        quote = "Quote the clause of the {text} that addresses: {hypothesis}"
        return stages.run("sem_map", len(joined), lambda: joined.sem_map(quote, suffix="evidence"))
    raise SystemExit(f"unknown workload {job['workload']!r}")


KEYS = {"medec": ["note_id", "error_sentence"], "contractnli": ["contract_id", "hypothesis"]}
"""The output columns the bench scores against the ground truth."""


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    stages = Stages(job["base_url"])
    before = counters(job["base_url"])
    started = time.monotonic()
    result = run(job, stages)
    elapsed_s = time.monotonic() - started
    after = counters(job["base_url"])
    columns = [c for c in KEYS[job["workload"]] if c in result.columns]
    rows = result[columns]
    if "error_sentence" in rows:
        rows = rows.assign(error_sentence=rows["error_sentence"].astype(str))
    record = run_record(
        before, after, elapsed_s, len(result),
        rows=json.loads(rows.to_json(orient="records")), stages=stages.stages,
    )  # fmt: skip
    Path(sys.argv[2]).write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
