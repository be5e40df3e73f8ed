"""Markdown tables of benchmark records, and BENCHMARKS.md's tables.

    python -m bench.report                   # check BENCHMARKS.md's tables against the records
    python -m bench.report --write           # regenerate them (:mod:`bench.page`)
    python -m bench.report bench/results/relational-quick-epyc-avx512.json

prints one table per workload and KV size, with each system's speed-up over
operator-at-a-time measured at the same KV size in the same file (the same invocation), or
over adaptive where operator-at-a-time did not run (``make bench-more``); ``--targets``
prints the issue-12 targets checked against the file instead, each speed-up target with
the most the prefill floor allows (operator-at-a-time's time over adaptive's
``prefill_floor_s``: its least prefill tokens and attention pairs at the engine's cost,
:mod:`bench.prefill_floor`): a target above it cannot be met by any schedule on that
engine.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.page import PAGE, RESULTS, render, stale_tables
from bench.runner import BASELINE

COLUMNS = (
    "system",
    "time (s)",
    "floor (s)",
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
    floor = record.get("prefill_floor_s")
    return [
        record["system"],
        f"{record['time_s']:.1f}",
        "-" if external or floor is None else f"{floor:.1f}",
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


def _time(group: list[dict[str, Any]], system: str, field: str = "time_s") -> float | None:
    """``system``'s ``field`` (its time by default) in ``group``; None if absent."""
    return next((r.get(field) for r in group if r["system"] == system), None)


def reference_system(group: list[dict[str, Any]]) -> str | None:
    """The system speed-ups are taken over: operator-at-a-time, else adaptive, else none."""
    names = {r["system"] for r in group}
    return next((s for s in (BASELINE, "adaptive") if s in names), None)


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
        reference = reference_system(group)
        base = _time(group, reference) if reference else None
        over = f"; speed-up over {reference}" if reference and reference != BASELINE else ""
        hosts = sorted({str(r["host"]) for r in group if r.get("host")})
        on = f"; on {' and '.join(hosts)}" if hosts else ""
        lines = [
            f"**{workload}**, KV cache {kv_tokens:,} tokens{share}{over}{on}",
            "",
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS),
        ]
        lines += ["| " + " | ".join(_row(r, base)) + " |" for r in group]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


SPEEDUP_TARGETS = {"contractnli": 2.2, "medec": 1.4, "biodex": 1.4, "fever": 1.25}
"""Issue 12: adaptive over operator-at-a-time at each workload's smallest KV size."""
LOTUS_TARGETS = {"contractnli": 3.0, "medec": 1.6}
"""Issue 12: adaptive over real Lotus on the same server."""
SPLIT_TOLERANCE = 0.02
PREFILL_TARGET = 1.05


def _verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def targets(records: list[dict[str, Any]]) -> str:
    """The issue-12 targets, checked against one file's records (one invocation)."""
    by_size: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for record in records:
        sizes = by_size.setdefault(record["workload"], {})
        sizes.setdefault(record["kv_cache_tokens"], []).append(record)
    lines = ["| target | workload | measured | verdict |", "|---|---|---|---|"]
    for workload, sizes in by_size.items():
        ratios, bounds = {}, {}
        for kv, group in sorted(sizes.items()):
            base, adaptive = _time(group, BASELINE), _time(group, "adaptive")
            if base and adaptive:
                ratios[kv] = base / adaptive
                floor = _time(group, "adaptive", "prefill_floor_s")
                if floor:
                    bounds[kv] = base / floor
        if ratios:
            smallest = min(ratios)
            goal = SPEEDUP_TARGETS.get(workload)
            if goal is not None:
                bound = (
                    f"; the prefill floor allows at most {bounds[smallest]:.2f}x"
                    if smallest in bounds
                    else ""
                )
                lines.append(
                    f"| adaptive / operator-at-a-time >= {goal}x at the smallest KV"
                    f" | {workload} | {ratios[smallest]:.2f}x ({smallest:,} tokens){bound}"
                    f" | {_verdict(ratios[smallest] >= goal)} |"
                )
            worst = min(ratios, key=ratios.__getitem__)
            every = ", ".join(f"{ratios[kv]:.2f}x" for kv in sorted(ratios))
            lines.append(
                f"| never below 1.0x at any KV size | {workload} | {every}"
                f" | {_verdict(ratios[worst] >= 1.0)} |"
            )
        for kv, group in sorted(sizes.items()):
            splits = {r["system"]: r["time_s"] for r in group if r["system"].startswith("static:")}
            adaptive = _time(group, "adaptive")
            if splits and adaptive:
                best = min(splits, key=splits.__getitem__)
                gap = adaptive / splits[best] - 1
                lines.append(
                    f"| adaptive within {SPLIT_TOLERANCE:.0%} of the best static split"
                    f" | {workload} ({kv:,} tokens) | {adaptive:.1f} s vs {best}"
                    f" {splits[best]:.1f} s ({gap:+.1%}) | {_verdict(gap <= SPLIT_TOLERANCE)} |"
                )
        prefill = [
            r["prefill_tokens"] / r["min_prefill_tokens"]
            for group in sizes.values()
            for r in group
            if r["system"] == "adaptive" and r["min_prefill_tokens"]
        ]
        if prefill:
            worst_prefill = max(prefill)
            lines.append(
                f"| adaptive prefill / minimum <= {PREFILL_TARGET} | {workload}"
                f" | {worst_prefill:.3f} (worst KV size)"
                f" | {_verdict(worst_prefill <= PREFILL_TARGET)} |"
            )
        goal = LOTUS_TARGETS.get(workload)
        for group in sizes.values():
            lotus, adaptive = _time(group, "lotus"), _time(group, "adaptive")
            if goal is not None and lotus and adaptive:
                lines.append(
                    f"| adaptive / Lotus >= {goal}x | {workload} | {lotus / adaptive:.2f}x"
                    f" ({lotus:.1f} s vs {adaptive:.1f} s) | {_verdict(lotus / adaptive >= goal)} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "results", type=Path, nargs="?", help="a relational record file to tabulate in full"
    )
    parser.add_argument(
        "--targets", action="store_true", help="print the issue-12 targets table instead"
    )
    parser.add_argument(
        "--write", action="store_true", help="regenerate BENCHMARKS.md's tables in place"
    )
    args = parser.parse_args(argv)
    if args.results is not None:
        records = json.loads(args.results.read_text())
        print(targets(records) if args.targets else markdown(records))
        return 0
    text = PAGE.read_text()
    if args.write:
        PAGE.write_text(render(text))
        print(f"{PAGE}: tables regenerated from {RESULTS}")
        return 0
    stale = stale_tables(text)
    for name in stale:
        print(f"{PAGE}: table {name!r} differs from its records (python -m bench.report --write)")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
