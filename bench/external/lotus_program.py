"""One Lotus program, run by Lotus itself or by kalypso.pandas: only the import and the
configuration line differ (``--library lotus`` in Lotus's venv, ``--library kalypso`` in
Kalypso's). It reads a job file written by ``bench.lotus_dropin`` (the tables, the
server's URL and model, the answer cap) and writes one JSON record: the program's time
(after the configuration line), the server's counters over it, and the rows it gave.

    .venv-lotus/bin/python bench/external/lotus_program.py --library lotus JOB.json OUT.json
    .venv/bin/python bench/external/lotus_program.py --library kalypso JOB.json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pandas as pd
from server_counters import counters, run_record  # beside this script

# litellm (under Lotus) otherwise fetches a price list from the network at import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def configure(library: str, job: dict) -> None:
    """The two lines a Lotus user changes: the import and the configuration."""
    if library == "lotus":
        import lotus
        from lotus.models import LM

        lm = LM(
            model=f"hosted_vllm/{job['model']}", api_base=f"{job['base_url']}/v1",
            temperature=0.0, max_tokens=job["max_tokens"], max_batch_size=64,
        )  # fmt: skip
        lotus.settings.configure(lm=lm)
    else:
        import kalypso
        import kalypso.pandas

        kalypso.configure(engine=job["base_url"], max_tokens=job["max_tokens"], progress=False)


def contract_program(contracts: pd.DataFrame, hypotheses: pd.DataFrame) -> pd.DataFrame:
    """The ContractNLI chain as a Lotus user writes it: which contracts are about
    confidentiality, which hypotheses each addresses, and the clause that does."""
    ndas = contracts.sem_filter("This {text} is about confidentiality obligations")
    pairs = ndas.sem_join(hypotheses, "The contract {text:left} addresses: {hypothesis:right}")
    return pairs.sem_map(
        "Quote the clause of the {text} that addresses: {hypothesis}", suffix="evidence"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", choices=("lotus", "kalypso"), required=True)
    parser.add_argument("job", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    job = json.loads(args.job.read_text())
    contracts = pd.DataFrame(job["tables"]["contracts"])
    hypotheses = pd.DataFrame(job["tables"]["hypotheses"])
    configure(args.library, job)
    before = counters(job["base_url"])
    started = time.monotonic()
    result = contract_program(contracts, hypotheses)
    rows = result[["contract_id", "hypothesis"]].to_dict("records")  # reads the frame
    elapsed_s = time.monotonic() - started
    after = counters(job["base_url"])
    record = run_record(
        before, after, elapsed_s, len(rows), rows=rows,
        columns=[str(c) for c in result.columns],
        contracts_kept=len({r["contract_id"] for r in rows}),
    )  # fmt: skip
    args.out.write_text(json.dumps(record))
    if args.library == "kalypso":
        import kalypso.pandas

        kalypso.pandas.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
