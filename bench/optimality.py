"""Schedule quality against the exact optimum (the Helium paper's Table 5).

Small instances of each library workflow (2-4 agents x 2-4 queries), the bundled model's
real tokens, one engine of 8,192 KV tokens; every policy's call order (list-scheduled by
its ranking) is costed with the token-steps model and compared with the MILP optimum::

    python -m bench.optimality [--out bench/results/workflows-optimality-milp.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from kalypso.core.cost import token_steps
from kalypso.core.milp import optimal_order
from kalypso.core.prompt import ChatLayout
from kalypso.engine.hf_tokenizer import load_hf_tokenizer
from kalypso.models import resolve_model
from kalypso.workflow.analysis import call_costs, policy_order
from kalypso.workflow.library.workflows import BUILDERS, Sizes
from kalypso.workflow.lower import lower
from kalypso.workflow.plan import batch_instances

CAPACITY_TOKENS = 8192
POLICIES = ("cache-aware", "querywise", "opwise", "random")
INSTANCES = {
    "mapred": Sizes(queries=3, agents=3, max_tokens=24, context_sentences=3),
    "debate": Sizes(queries=3, agents=2, max_tokens=24, context_sentences=3),
    "reflect": Sizes(queries=2, agents=1, max_tokens=24, context_sentences=3),
    "iterative": Sizes(queries=3, agents=1, chunks=3, max_tokens=24),
    "parallel": Sizes(queries=2, agents=2, chunks=2, max_tokens=24),
}


def measure(time_limit_s: float) -> list[dict[str, object]]:
    layout = ChatLayout(load_hf_tokenizer(resolve_model()))
    records: list[dict[str, object]] = []
    for name, sizes in INSTANCES.items():
        job = BUILDERS[name](sizes)
        lowered = lower(list(job.workflows[:1]))
        instances = batch_instances(lowered, job.inputs[0])
        calls, keys = call_costs(lowered, instances, layout, lambda n: n.max_tokens)
        orders = {
            p: policy_order(p, lowered, keys, calls, layout, CAPACITY_TOKENS) for p in POLICIES
        }
        costs = {p: token_steps(calls, o, CAPACITY_TOKENS) for p, o in orders.items()}
        started = time.monotonic()
        best = optimal_order(
            calls, CAPACITY_TOKENS, time_limit_s=time_limit_s, warm_start=orders["cache-aware"]
        )
        record: dict[str, object] = {
            "workflow": name,
            "calls": len(calls),
            "optimum": round(best.makespan, 3),
            "proven": best.proven,
            "lower_bound": round(best.lower_bound, 3),
            "solve_s": round(time.monotonic() - started, 1),
        }
        for policy, cost in costs.items():
            record[policy] = round(cost, 3)
            record[f"{policy}_gap_pct"] = round(100 * (cost - best.makespan) / best.makespan, 2)
        records.append(record)
        print(json.dumps(record))
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_out = Path("bench/results/workflows-optimality-milp.json")
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--time-limit-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    records = measure(args.time_limit_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
