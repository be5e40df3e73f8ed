"""Run a workload shape with the real Palimpzest library against a running vLLM server.

This script runs in Palimpzest's own virtual environment (``.venv-pz``, palimpzest==0.9.0;
it pins numpy==2.0.2, pyarrow==20.0.0 and psutil==5.9.5), not Kalypso's. Like
``lotus_runner.py`` it reads a job file written by ``python -m bench`` (workload name, the
tables, server URL and model) and writes one JSON record: time, LLM calls and the server's
prompt and prefix-cache-hit token counters over the run.

    .venv-pz/bin/python bench/pz_runner.py JOB.json OUT.json

Palimpzest 0.9.0 cannot be pointed at an arbitrary served model without help, so two
runtime shims are applied here (no library file is edited):

* its ``Model`` is a closed enum; the one vLLM member (``hosted_vllm/qwen/Qwen1.5-0.5B-Chat``)
  fails every call (a missing comma in ``Generator.__call__``, generators.py line 341). The
  plans therefore name ``Model.GPT_5_NANO`` (a "reasoning" model, so Palimpzest picks its
  short no-reasoning prompts: ``ANSWER: TRUE``) and ``litellm.completion``, which Palimpzest
  calls for every operator, is wrapped to send the request to the job's server and model
  with temperature 0 and ``max_tokens`` (Palimpzest sets no output limit itself);
* ``palimpzest.core.lib.schemas`` imports ``typing.TypeAliasType`` (Python 3.12+) though the
  package says Python>=3.10; on 3.11 it is lent ``typing_extensions.TypeAliasType`` while
  Palimpzest itself imports.

Palimpzest has no negated filter or join: as in ``lotus_runner.py`` the filter (and the
ContractNLI join) asks Kalypso's question and the rows (pairs) the LLM says no to are kept;
each negated operator is its own Palimpzest run, the rest of the plan runs over what it
kept.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
import typing
from pathlib import Path
from typing import Any

# litellm (under Palimpzest) otherwise fetches a price list from the network at import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
import pandas as pd
import typing_extensions
from server_counters import counters, run_record  # beside this script

# Palimpzest's dependencies first: typing_extensions builds 3.12-style TypeVars while
# typing has TypeAliasType, which fails on 3.11
for _name in ("pydantic", "chromadb", "smolagents", "sentence_transformers", "fastapi", "openai"):
    importlib.import_module(_name)
_lent = not hasattr(typing, "TypeAliasType")
if _lent:
    typing.TypeAliasType = typing_extensions.TypeAliasType  # type: ignore[attr-defined]
try:
    import palimpzest as pz
finally:
    if _lent:
        del typing.TypeAliasType  # type: ignore[attr-defined]

MODEL = pz.Model.GPT_5_NANO
"""Only a name for Palimpzest's optimizer and prompts; requests go to the job's model."""


FAILED: list[str] = []
"""Errors of LLM calls: Palimpzest logs them and goes on with FALSE or empty fields."""


def point_litellm_at(base_url: str, model: str, max_tokens: int) -> None:
    """Send every completion Palimpzest asks for to the job's vLLM server, greedily."""
    completion = litellm.completion

    def to_server(*_: Any, messages: Any = None, **__: Any) -> Any:
        try:
            return completion(
                model=f"hosted_vllm/{model}", messages=messages, api_base=f"{base_url}/v1",
                api_key="EMPTY", temperature=0.0, max_tokens=max_tokens, num_retries=2,
            )  # fmt: skip
        except Exception as error:
            FAILED.append(repr(error))
            raise

    # Palimpzest calls litellm.completion(model=..., messages=..., **kwargs) at each request
    litellm.completion = to_server


def config() -> pz.QueryProcessorConfig:
    return pz.QueryProcessorConfig(
        available_models=[MODEL], optimizer_strategy="none", execution_strategy="parallel",
        max_workers=64, progress=False, allow_mixtures=False, allow_critic=False,
        allow_rag_reduction=False, allow_split_merge=False,
    )  # fmt: skip


def dataset(name: str, frame: pd.DataFrame) -> pz.Dataset:
    return pz.MemoryDataset(id=name, vals=frame.reset_index(drop=True))


def keep_no(frame: pd.DataFrame, key: str, question: str) -> pd.DataFrame:
    """A negated sem_filter (Kalypso's ``negate=True``): keep rows the LLM says no to."""
    passed = dataset(f"{key}-filter", frame).sem_filter(question, depends_on="text").run(config())
    yes = set(passed.to_df()[key]) if len(passed) else set()
    return frame[~frame[key].isin(yes)]


def run(job: dict[str, Any]) -> int:
    tables = {name: pd.DataFrame(rows) for name, rows in job["tables"].items()}
    if job["workload"] == "medec":
        notes = keep_no(
            tables["notes"], "note_id", "Is this clinical note text free of medical errors?"
        )
        if notes.empty:
            return 0
        plan = (
            dataset("notes", notes)
            .sem_map(
                [{"name": "error_sentence", "type": str,
                  "desc": "Which sentence of the text contains the error? Give its number."}],
                depends_on="text",
            )
            .sem_map(
                [{"name": "correction", "type": str,
                  "desc": "Rewrite the wrong sentence of the text correctly."}],
                depends_on="text",
            )
        )  # fmt: skip
        return len(plan.run(config()))
    if job["workload"] == "contractnli":
        contracts = keep_no(
            tables["contracts"],
            "contract_id",
            "Is this contract text unrelated to confidentiality obligations?",
        )
        if contracts.empty:
            return 0
        hypotheses = tables["hypotheses"]
        # Palimpzest's sem_join has no negation either: its own join over all pairs asks the
        # question, and the pairs the LLM says no to are kept
        silent = (
            dataset("contracts", contracts)
            .sem_join(
                dataset("hypotheses", hypotheses),
                "Is the contract text silent about whether the hypothesis holds?",
                depends_on=["text", "hypothesis"],
            )
            .run(config())
        )  # fmt: skip
        pairs = contracts.merge(hypotheses, how="cross")
        if len(silent):
            said_yes = silent.to_df()[["contract_id", "hypothesis"]].drop_duplicates()
            marked = pairs.merge(said_yes, how="left", indicator=True)
            pairs = marked[marked["_merge"] == "left_only"].drop(columns="_merge")
        if pairs.empty:
            return 0
        plan = dataset("pairs", pairs).sem_map(
            [{"name": "evidence", "type": str,
              "desc": "Quote the clause of the contract text that addresses the hypothesis."}],
            depends_on=["text", "hypothesis"],
        )  # fmt: skip
        return len(plan.run(config()))
    raise SystemExit(f"unknown workload {job['workload']!r}")


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2]).resolve()
    point_litellm_at(job["base_url"], job["model"], job.get("max_tokens", 48))
    before = counters(job["base_url"])
    home = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="pz-runner-") as scratch:
        os.chdir(scratch)  # Palimpzest writes parse-answer-errors/ into the working directory
        try:
            started = time.monotonic()
            output_rows = run(job)
            elapsed_s = time.monotonic() - started
        finally:
            os.chdir(home)
    after = counters(job["base_url"])
    if FAILED:
        print(f"{len(FAILED)} LLM calls failed; first: {FAILED[0]}", file=sys.stderr)
        return 1
    record = run_record(before, after, elapsed_s, output_rows)
    out_path.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
