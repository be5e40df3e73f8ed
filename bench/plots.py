"""PNG plots of benchmark records, in the spirit of the paper's Figures 7-12.

    python -m bench.plots bench/results/relational-quick-epyc-avx512.json

writes, next to each JSON file, the figures its records allow (and deletes an earlier run's
figure that they do not):

* ``<name>-fig7-time.png``: end-to-end time per workload and system (Figure 7);
* ``<name>-fig8-kv-sweep.png``: time against KV cache size per workload (Figure 8);
* ``<name>-fig9-blocking.png``: operator-at-a-time (blocking) against adaptive (pipelined),
  with the speed-up (Figure 9);
* ``<name>-fig10-splits.png``: static stage splits against adaptive (Figure 10);
* ``<name>-fig11-pinning.png``: virtual against explicit pinning, with prefixes lost
  (Figure 11);
* ``<name>-fig12-budgets.png``: fixed output-token budgets against the estimator (Figure 12);
* ``<name>-prefill.png``: prefill tokens computed against the plan's minimum.

Figures 7, 9, 11 and 12 use each workload's *main* KV size (the one most systems ran at);
Figure 8 uses every size. Ratios come only from records of the same file, i.e. runs of the
same invocation.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from bench.report import reference_system
from bench.runner import BASELINE

logger = logging.getLogger(__name__)

Record = dict[str, Any]
ADAPTIVE = "adaptive"


def main_setting(records: list[Record]) -> list[Record]:
    """Each workload's records at the KV size most systems ran at (ties: the smallest)."""
    counts = Counter((r["workload"], r["kv_cache_tokens"]) for r in records)
    main: dict[str, int] = {}
    for (workload, kv), count in sorted(counts.items()):
        if workload not in main or count > counts[(workload, main[workload])]:
            main[workload] = kv
    return [r for r in records if main.get(r["workload"]) == r["kv_cache_tokens"]]


def _value(records: list[Record], workload: str, system: str, field: str) -> float | None:
    for r in records:
        if r["workload"] == workload and r["system"] == system:
            return float(r[field])
    return None


def _no_label(workload: str, system: str) -> str:
    return ""


def _bars(
    axes: Axes,
    records: list[Record],
    systems: list[str],
    label: Callable[[str, str], str] = _no_label,
    field: str = "time_s",
    ylabel: str = "time (s)",
) -> float:
    """Grouped bars of ``field``, one group per workload, each bar annotated with
    ``label``; returns the bar width."""
    workloads = list(dict.fromkeys(r["workload"] for r in records))
    width = 0.8 / max(1, len(systems))
    for index, system in enumerate(systems):
        labelled = False
        for position, workload in enumerate(workloads):
            value = _value(records, workload, system, field)
            if value is None:
                continue
            x = position + index * width
            axes.bar(x, value, width, color=f"C{index}", label=None if labelled else system)
            labelled = True
            axes.annotate(label(workload, system), (x, value), ha="center", va="bottom", fontsize=7)
    axes.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(workloads))])
    axes.set_xticklabels(workloads)
    axes.set_ylabel(ylabel)
    axes.legend(fontsize=7)
    return width


def _speedup_label(records: list[Record], reference: str) -> Callable[[str, str], str]:
    def label(workload: str, system: str) -> str:
        base = _value(records, workload, reference, "time_s")
        value = _value(records, workload, system, "time_s")
        if base is None or not value:
            return ""
        return f"{base / value:.2f}x"

    return label


def _save(figure: Any, path: Path, written: list[Path]) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    written.append(path)


def _present(records: list[Record], systems: Sequence[str]) -> list[str]:
    names = {r["system"] for r in records}
    return [s for s in systems if s in names]


def fig7_time(records: list[Record], path: Path, written: list[Path]) -> None:
    main = main_setting(records)
    systems = _present(main, [BASELINE, ADAPTIVE, "adaptive+explicit", "lotus", "palimpzest"])
    reference = reference_system(main) or BASELINE
    figure, axes = plt.subplots(figsize=(8, 4))
    _bars(axes, main, systems, _speedup_label(main, reference))
    axes.set_title(f"end-to-end time (labels: speed-up over {reference})")
    _save(figure, path, written)


def fig8_kv_sweep(records: list[Record], path: Path, written: list[Path]) -> None:
    series: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if r["system"] in (BASELINE, ADAPTIVE, "lotus", "palimpzest"):
            series[r["workload"]][r["system"]][r["kv_cache_tokens"]] = r["time_s"]
    swept = {w: s for w, s in series.items() if len({kv for p in s.values() for kv in p}) > 1}
    if not swept:
        return
    figure, all_axes = plt.subplots(1, len(swept), figsize=(4 * len(swept), 3.5), squeeze=False)
    for axes, (workload, systems) in zip(all_axes[0], sorted(swept.items()), strict=True):
        for system, points in systems.items():
            sizes = sorted(points)
            axes.plot(sizes, [points[kv] for kv in sizes], marker="o", label=system)
        axes.set_xlabel("KV cache (tokens)")
        axes.set_ylabel("time (s)")
        axes.set_title(workload)
        axes.legend(fontsize=7)
    _save(figure, path, written)


def fig9_blocking(records: list[Record], path: Path, written: list[Path]) -> None:
    main = main_setting(records)
    if len(_present(main, [BASELINE, ADAPTIVE])) < 2:
        return
    figure, axes = plt.subplots(figsize=(7, 4))
    _bars(axes, main, [BASELINE, ADAPTIVE], _speedup_label(main, BASELINE))
    axes.set_title("blocking (operator-at-a-time) vs pipelined (adaptive)")
    _save(figure, path, written)


def fig10_splits(records: list[Record], path: Path, written: list[Path]) -> None:
    series: dict[tuple[str, int], dict[float, float]] = defaultdict(dict)
    adaptive: dict[tuple[str, int], float] = {}
    for r in records:
        key = (r["workload"], r["kv_cache_tokens"])
        if r["system"].startswith("static:"):
            series[key][float(r["system"].split(":")[1])] = r["time_s"]
        elif r["system"] == ADAPTIVE:
            adaptive[key] = r["time_s"]
    if not series:
        return
    figure, axes = plt.subplots(figsize=(6, 4))
    for key, points in sorted(series.items()):
        shares = sorted(points)
        line = axes.plot(
            shares, [points[f] for f in shares], marker="o", label=f"static, {key[0]} KV {key[1]:,}"
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
    _save(figure, path, written)


def fig11_pinning(records: list[Record], path: Path, written: list[Path]) -> None:
    main = main_setting(records)
    systems = [ADAPTIVE, "adaptive+explicit"]
    if len(_present(main, systems)) < 2:
        return

    def lost(workload: str, system: str) -> str:
        value = _value(main, workload, system, "lost_prefixes")
        return "" if value is None else f"lost {value:.0f}"

    figure, axes = plt.subplots(figsize=(7, 4))
    _bars(axes, main, systems, lost)
    axes.set_title("virtual vs explicit pinning (labels: prefixes lost to eviction)")
    _save(figure, path, written)


def fig12_budgets(records: list[Record], path: Path, written: list[Path]) -> None:
    main = main_setting(records)
    by_workload: dict[str, dict[int, Record]] = defaultdict(dict)
    for r in main:
        if "+fixed:" in r["system"]:
            by_workload[r["workload"]][int(r["system"].rsplit(":", 1)[1])] = r
    if not by_workload:
        return
    figure, axes = plt.subplots(figsize=(6, 4))
    for index, (workload, points) in enumerate(sorted(by_workload.items())):
        budgets = sorted(points)
        times = [points[b]["time_s"] for b in budgets]
        axes.plot(budgets, times, marker="o", color=f"C{index}", label=f"fixed budget, {workload}")
        for budget, seconds in zip(budgets, times, strict=True):
            continued = points[budget].get("continuations", points[budget].get("retries", 0))
            axes.annotate(f"{continued} continued", (budget, seconds), fontsize=7)
        estimated = _value(main, workload, ADAPTIVE, "time_s")
        if estimated is not None:
            axes.axhline(
                estimated, linestyle="--", color=f"C{index}", label=f"estimator, {workload}"
            )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("fixed first output-token budget of generative operators")
    axes.set_ylabel("time (s)")
    axes.set_title("fixed output-token budgets vs the estimator")
    axes.legend(fontsize=7)
    _save(figure, path, written)


def prefill(records: list[Record], path: Path, written: list[Path]) -> None:
    main = [r for r in main_setting(records) if not r["system"].startswith("static:")]
    systems = list(dict.fromkeys(r["system"] for r in main))
    workloads = list(dict.fromkeys(r["workload"] for r in main))
    figure, axes = plt.subplots(figsize=(max(7, 1.2 * len(workloads) * len(systems) / 2), 4))
    width = _bars(axes, main, systems, field="prefill_tokens", ylabel="prefill tokens computed")
    for position, workload in enumerate(workloads):
        minimum = next(r["min_prefill_tokens"] for r in main if r["workload"] == workload)
        axes.hlines(minimum, position - width / 2, position + 0.8, colors="black")
    axes.set_title("prefill computed (black line: the plan's minimum)")
    _save(figure, path, written)


FIGURES = {
    "fig7-time": fig7_time,
    "fig8-kv-sweep": fig8_kv_sweep,
    "fig9-blocking": fig9_blocking,
    "fig10-splits": fig10_splits,
    "fig11-pinning": fig11_pinning,
    "fig12-budgets": fig12_budgets,
    "prefill": prefill,
}


def plot_file(results: Path) -> list[Path]:
    """Write the plots one results file allows; returns the paths written. A figure of an
    earlier run that these records do not allow is deleted, so every figure beside the
    file comes from its records."""
    records: list[Record] = json.loads(results.read_text())
    stem = results.with_suffix("")
    written: list[Path] = []
    for suffix, draw in FIGURES.items():
        path = Path(f"{stem}-{suffix}.png")
        draw(records, path, written)
        if path not in written and path.exists():
            path.unlink()
            logger.info("deleted %s: these records do not allow it", path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for results in args.results:
        for path in plot_file(results):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
