"""Run a workload shape with the real Palimpzest library against a running vLLM server.

This script runs in Palimpzest's own virtual environment (``make pz-venv``: palimpzest
1.5.3, the paper's version, which needs Python >= 3.12; it pins numpy==2.0.2 and
psutil==5.9.5), not Kalypso's. Like ``lotus_runner.py`` it reads a job file written by
``python -m bench`` (workload name, the tables, server URL and model) and writes one JSON
record: time, LLM calls, the server's token counters over the run and per operator, and
the output rows' key columns (scored by the bench against the ground truth).

    .venv-pz/bin/python bench/external/pz_runner.py JOB.json OUT.json

Palimpzest 1.5.3 reads a table of model figures from S3 while it imports; with no route
there, the copy it ships is served for that URL (one runtime shim, no file edited).
It serves vLLM models itself: ``pz.Model("hosted_vllm/<name>",
api_base=...)`` with keyword arguments passed to every completion (here ``max_tokens``:
Palimpzest sets no output limit of its own; Kalypso's caps are used, 8 tokens for
predicates) and temperature 0. Its optimizer runs with one model and no alternatives
(``optimizer_strategy="none"``), as a user with one served model would.

Palimpzest has no negated filter or join: as in ``lotus_runner.py`` the filter (and the
ContractNLI join) asks Kalypso's question and the rows (pairs) the LLM says no to are kept;
each negated operator is its own Palimpzest run, the rest of the plan runs over what it
kept.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# litellm (under Palimpzest) otherwise fetches a price list from the network at import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pandas as pd
import requests
from server_counters import counters, run_record  # beside this script


def _offline_model_information() -> None:
    """Palimpzest fetches its table of model figures from S3 while it imports; this
    machine has no route there. Serve the copy Palimpzest ships
    (``palimpzest/utils/pz_models_information.json``) for that one URL."""
    spec = importlib.util.find_spec("palimpzest")
    assert spec is not None and spec.submodule_search_locations
    local = Path(spec.submodule_search_locations[0]) / "utils" / "pz_models_information.json"
    get = requests.get

    class _Local:
        def json(self) -> Any:
            return json.loads(local.read_text())

    def offline_get(url: str, *args: Any, **kwargs: Any) -> Any:
        if url.endswith("/pz_models_information.json") and local.is_file():
            return _Local()
        return get(url, *args, **kwargs)

    requests.get = offline_get  # type: ignore[assignment]


_offline_model_information()
import palimpzest as pz  # noqa: E402

PREDICATE_MAX_TOKENS = 8
"""Kalypso's bound for predicate answers (the paper's configuration)."""


class Runner:
    """One job: the model per output cap, and rows and server counters per operator."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.stages: list[dict[str, Any]] = []
        self._models: dict[int, Any] = {}

    def model(self, max_tokens: int) -> Any:
        if max_tokens not in self._models:
            self._models[max_tokens] = pz.Model(
                f"hosted_vllm/{self.job['model']}",
                api_base=f"{self.job['base_url']}/v1",
                max_tokens=max_tokens,
            )
        return self._models[max_tokens]

    def config(self, max_tokens: int) -> Any:
        return pz.QueryProcessorConfig(
            available_models=[self.model(max_tokens)], optimizer_strategy="none",
            execution_strategy="parallel", max_workers=64, progress=False,
            allow_mixtures=False, allow_critic=False, allow_rag_reduction=False,
            allow_split_merge=False, allow_model_selection=False,
        )  # fmt: skip

    def stage(self, operator: str, rows_in: int, step: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        before = counters(self.job["base_url"])
        out = step()
        after = counters(self.job["base_url"])
        record: dict[str, Any] = {"operator": operator, "rows_in": rows_in, "rows_out": len(out)}
        record.update({k: after[k] - before[k] for k in after})
        record["calls"] = record.pop("llm_calls")
        self.stages.append(record)
        return out

    def keep_no(self, frame: pd.DataFrame, key: str, question: str) -> pd.DataFrame:
        """A negated sem_filter (Kalypso's ``negate=True``): keep rows the LLM says no to."""

        def step() -> pd.DataFrame:
            data = pz.MemoryDataset(id=f"{key}-filter", vals=frame.reset_index(drop=True))
            passed = data.sem_filter(question, depends_on="text").run(
                self.config(PREDICATE_MAX_TOKENS)
            )
            yes = set(passed.to_df()[key]) if len(passed) else set()
            return frame[~frame[key].isin(yes)]

        return self.stage("sem_filter", len(frame), step)

    def sem_map(self, frame: pd.DataFrame, name: str, desc: str, depends_on: Any, cap: int) -> Any:
        def step() -> pd.DataFrame:
            data = pz.MemoryDataset(id=f"{name}-map", vals=frame.reset_index(drop=True))
            column = [{"name": name, "type": str, "desc": desc}]
            out = data.sem_map(column, depends_on=depends_on).run(self.config(cap))
            return out.to_df() if len(out) else frame.assign(**{name: []})

        return self.stage("sem_map", len(frame), step)


def run(runner: Runner) -> tuple[pd.DataFrame, list[str]]:
    job = runner.job
    tables = {name: pd.DataFrame(rows) for name, rows in job["tables"].items()}
    if job["workload"] == "medec":
        notes = runner.keep_no(
            tables["notes"], "note_id", "Is this clinical note text free of medical errors?"
        )
        if notes.empty:
            return notes, ["note_id"]
        which = "Which sentence of the text contains the error? Give its number."
        notes = runner.sem_map(notes, "error_sentence", which, "text", 16)
        rewrite = "Rewrite the wrong sentence of the text correctly."
        notes = runner.sem_map(notes, "correction", rewrite, "text", 48)
        return notes, ["note_id", "error_sentence"]
    if job["workload"] == "contractnli":
        contracts = runner.keep_no(
            tables["contracts"],
            "contract_id",
            "Is this contract text unrelated to confidentiality obligations?",
        )
        keys = ["contract_id", "hypothesis"]
        if contracts.empty:
            return contracts, keys
        hypotheses = tables["hypotheses"]
        pairs = contracts.merge(hypotheses, how="cross")

        def silent_pairs() -> pd.DataFrame:
            # Palimpzest's sem_join has no negation either: its own join over all pairs
            # asks the question, and the pairs the LLM says no to are kept
            left = pz.MemoryDataset(id="contracts", vals=contracts.reset_index(drop=True))
            right = pz.MemoryDataset(id="hypotheses", vals=hypotheses.reset_index(drop=True))
            silent = left.sem_join(
                right,
                "Is the contract text silent about whether the hypothesis holds?",
                depends_on=["text", "hypothesis"],
            ).run(runner.config(PREDICATE_MAX_TOKENS))
            if not len(silent):
                return pairs
            said_yes = silent.to_df()[keys].drop_duplicates()
            marked = pairs.merge(said_yes, how="left", indicator=True)
            return marked[marked["_merge"] == "left_only"].drop(columns="_merge")

        kept = runner.stage("sem_join", len(pairs), silent_pairs)
        if kept.empty:
            return kept, keys
        quote = "Quote the clause of the contract text that addresses the hypothesis."
        cap = job.get("quote_tokens", 16)
        return runner.sem_map(kept, "evidence", quote, ["text", "hypothesis"], cap), keys
    raise SystemExit(f"unknown workload {job['workload']!r}")


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2]).resolve()
    runner = Runner(job)
    before = counters(job["base_url"])
    home = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="pz-runner-") as scratch:
        os.chdir(scratch)  # Palimpzest writes files into the working directory
        try:
            started = time.monotonic()
            result, keys = run(runner)
            elapsed_s = time.monotonic() - started
        finally:
            os.chdir(home)
    after = counters(job["base_url"])
    columns = [c for c in keys if c in result.columns]
    rows = json.loads(result[columns].astype(str).to_json(orient="records"))
    for row in rows:  # ids back to numbers, as in the tables the bench scores against
        for key in ("note_id", "contract_id"):
            if key in row:
                row[key] = int(row[key])
    record = run_record(before, after, elapsed_s, len(result), rows=rows, stages=runner.stages)
    out_path.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
