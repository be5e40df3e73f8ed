"""Markdown tables of benchmark records, for BENCHMARKS.md.

    python -m bench.report bench/results/quick.json

prints one table per workload and KV size, with each system's speed-up over
operator-at-a-time measured at the same KV size in the same file (the same invocation).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.runner import BASELINE

COLUMNS = (
    "system",
    "time (s)",
    "speed-up",
    "prefill s / decode s",
    "calls",
    "decoded",
    "prefill",
    "prefill/min",
    "lost",
    "continued",
    "rows per operator",
    "accuracy",
    "decisions differ (not near-ties)",
    "near-ties",
    "cells agree",
)


def selectivity(record: dict[str, Any]) -> str:
    """Rows out/in per operator (index searches, which keep every row, left out)."""
    stages = [s for s in record.get("stages", ()) if "index_search" not in s["operator"]]
    return " -> ".join(f"{s['rows_out']}/{s['rows_in']}" for s in stages) or "-"


def accuracy(record: dict[str, Any]) -> str:
    if record.get("accuracy") is None:
        return "-"
    return f"{record['accuracy_metric']} {record['accuracy']:.2f}"


def _row(record: dict[str, Any], base_time_s: float | None) -> list[str]:
    speedup = f"{base_time_s / record['time_s']:.2f}x" if base_time_s and record["time_s"] else "-"
    minimum = record["min_prefill_tokens"]
    external = record["system"] in ("lotus", "palimpzest")
    phases = record.get("prefill_time_s"), record.get("decode_time_s")
    return [
        record["system"],
        f"{record['time_s']:.1f}",
        speedup,
        f"{phases[0]:.0f} / {phases[1]:.0f}" if None not in phases else "-",
        str(record["llm_calls"]),
        f"{record.get('output_tokens', 0):,}",
        f"{record['prefill_tokens']:,}",
        "-" if external or not minimum else f"{record['prefill_tokens'] / minimum:.2f}",
        "-" if external else str(record["lost_prefixes"]),
        "-" if external else str(record.get("continuations", record.get("retries", 0))),
        selectivity(record),
        accuracy(record),
        "-"
        if external
        else f"{record.get('decisions_differing', 0)} ({record.get('differing_not_near_ties', 0)})",
        "-" if external else str(record.get("near_ties", 0)),
        "-" if external else f"{record['cells_agree']:.3f}",
    ]


def markdown(records: list[dict[str, Any]]) -> str:
    """One table per (workload, KV size), in the order the records were written."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["workload"], record["kv_cache_tokens"]), []).append(record)
    parts = []
    for (workload, kv_tokens), group in groups.items():
        table_tokens = group[0].get("table_tokens") or 0
        share = (
            f", {kv_tokens / table_tokens:.0%} of the table's {table_tokens:,}"
            if table_tokens
            else ""
        )
        base = next((r["time_s"] for r in group if r["system"] == BASELINE), None)
        lines = [
            f"**{workload}**, KV cache {kv_tokens:,} tokens{share}",
            "",
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS),
        ]
        lines += ["| " + " | ".join(_row(r, base)) + " |" for r in group]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    print(markdown(json.loads(args.results.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
