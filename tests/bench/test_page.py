"""BENCHMARKS.md's tables are what the committed records give (bench.page), and the
front pages stay short."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.page import PAGE, RESULTS, PageError, render, stale_tables

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_tables_equal_what_the_records_give(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    page = PAGE.read_text()
    assert "<!-- table: relational -->" in page
    assert stale_tables(page, RESULTS) == [], "run python -m bench.report --write"


def test_every_marked_table_is_generated_and_a_changed_one_is_found(
    tmp_path: Path,
) -> None:
    records = [
        {"workload": "contractnli", "system": s, "time_s": t, "prefill_floor_s": 40.0,
         "date": "2026-12-05", "commit": "abc1234", "host": "AMD EPYC, 2 cores, AVX512"}
        for s, t in (("operator-at-a-time", 100.0), ("adaptive", 50.0))
    ]  # fmt: skip
    (tmp_path / "relational-bound-epyc-avx512.json").write_text(json.dumps(records))
    page = "intro\n<!-- table: relational-bound -->\nstale\n<!-- /table -->\nafter\n"
    fresh = render(page, tmp_path)
    assert fresh.startswith("intro\n<!-- table: relational-bound -->\n")
    assert fresh.endswith("<!-- /table -->\nafter\n")
    assert "| contractnli | 100.0 | 50.0 | 2.00x | 40.0 | 2.50x | 80% |" in fresh
    assert "2026-12-05, commit `abc1234`, AMD EPYC, 2 cores, AVX512" in fresh
    assert stale_tables(page, tmp_path) == ["relational-bound"]
    assert stale_tables(fresh, tmp_path) == []
    assert stale_tables(fresh.replace("2.00x", "2.10x"), tmp_path) == ["relational-bound"]


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ("<!-- table: nosuch -->\n<!-- /table -->\n", "no table named 'nosuch'"),
        ("<!-- table: relational -->\nrows\n", "not closed"),
        ("<!-- table: relational -->\n<!-- table: workflows -->\n", "not closed before"),
    ],
)
def test_malformed_markers_are_refused(page: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(PageError, match=message):
        render(page, tmp_path)


def test_the_front_pages_are_short_and_describe_the_software() -> None:
    readme = (ROOT / "README.md").read_text()
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert len(benchmarks.splitlines()) <= 400
    docs = [readme, benchmarks, *(p.read_text() for p in (ROOT / "docs").rglob("*.md"))]
    for text in docs:
        for line in text.splitlines():
            assert not re.search(r"\bsessions?\b", line, re.I) or "HTTP" in line, line


def test_records_under_other_engine_limits_leave_the_replica_table_alone(tmp_path: Path) -> None:
    from bench.page import replicas

    for source in ("replicas-sim.json", "replicas-cpu-epyc-avx512.json"):
        (tmp_path / source).write_text((RESULTS / source).read_text())
    records = json.loads((tmp_path / "replicas-sim.json").read_text())
    faster = {**records[-1], "time_s": 0.123}
    (tmp_path / "replicas-sim.json").write_text(json.dumps([*records, faster]))
    assert replicas(tmp_path) != replicas(RESULTS)  # a later record of a cell shows
    wide = {**faster, "max_num_seqs": 1024, "max_step_tokens": 8192}
    (tmp_path / "replicas-sim.json").write_text(json.dumps([*records, wide]))
    assert replicas(tmp_path) == replicas(RESULTS)
