"""PNG plots of benchmark records, in the spirit of the paper's figures.

    python -m kalypso.bench.plots bench/results/vllm-quick.json bench/results/sim-paper.json

writes, next to each JSON file, ``<name>-time.png`` (end-to-end time per workload and
system, like Figure 7), ``<name>-prefill.png`` (prefill tokens computed against the
minimum) and, when static splits were run, ``<name>-splits.png`` (static splits against
adaptive per KV size, like Figure 10). Ratios come only from records of the same file,
i.e. runs of the same invocation.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _grouped_bars(
    records: list[dict[str, Any]], value: str, ylabel: str, title: str, path: Path
) -> None:
    workloads = sorted({(r["workload"], r["kv_cache_tokens"]) for r in records})
    systems = list(dict.fromkeys(r["system"] for r in records))
    width = 0.8 / max(1, len(systems))
    figure, axes = plt.subplots(figsize=(max(6, 1.6 * len(workloads) * len(systems) / 2), 4))
    for index, system in enumerate(systems):
        values = [
            next(
                (
                    r[value]
                    for r in records
                    if (r["workload"], r["kv_cache_tokens"]) == w and r["system"] == system
                ),
                0.0,
            )
            for w in workloads
        ]
        positions = [i + index * width for i in range(len(workloads))]
        axes.bar(positions, values, width, label=system)
    axes.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(workloads))])
    axes.set_xticklabels([f"{w}\nKV {kv:,}" for w, kv in workloads])
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _splits(records: list[dict[str, Any]], path: Path) -> bool:
    series: dict[tuple[str, int], dict[float, float]] = defaultdict(dict)
    adaptive: dict[tuple[str, int], float] = {}
    for r in records:
        key = (r["workload"], r["kv_cache_tokens"])
        if r["system"].startswith("static:"):
            series[key][float(r["system"].split(":")[1])] = r["time_s"]
        elif r["system"] == "adaptive":
            adaptive[key] = r["time_s"]
    if not series:
        return False
    figure, axes = plt.subplots(figsize=(6, 4))
    for key, points in sorted(series.items()):
        fractions = sorted(points)
        line = axes.plot(
            fractions,
            [points[f] for f in fractions],
            marker="o",
            label=f"static, {key[0]} KV {key[1]:,}",
        )
        if key in adaptive:
            axes.axhline(
                adaptive[key],
                linestyle="--",
                color=line[0].get_color(),
                label=f"adaptive, {key[0]} KV {key[1]:,}",
            )
    axes.set_xlabel("first stage's share of KV memory (static split)")
    axes.set_ylabel("time (s)")
    axes.set_title("static stage splits vs adaptive")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_file(results: Path) -> list[Path]:
    """Write the plots for one results file; returns the paths written."""
    records: list[dict[str, Any]] = json.loads(results.read_text())
    stem = results.with_suffix("")
    written = []
    main = [r for r in records if not r["system"].startswith("static:")]
    time_path = Path(f"{stem}-time.png")
    _grouped_bars(main, "time_s", "time (s)", f"end-to-end time ({results.name})", time_path)
    written.append(time_path)
    prefill_path = Path(f"{stem}-prefill.png")
    _grouped_bars(
        main,
        "prefill_tokens",
        "prefill tokens computed",
        f"prefill computed ({results.name})",
        prefill_path,
    )
    written.append(prefill_path)
    splits_path = Path(f"{stem}-splits.png")
    if _splits(records, splits_path):
        written.append(splits_path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for results in args.results:
        for path in plot_file(results):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
