"""Lotus-style programs through kalypso.pandas, on the simulator and on real vLLM: the
frame has Lotus's rows, labels and columns, and running each program as one plan gives
the same answers as running each of its operators at once (Lotus's way)."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

import kalypso
import kalypso.pandas
from kalypso.engine.open import EngineSpec
from kalypso.engine.sim import SimEngine
from kalypso.pandas import accessors
from kalypso.pandas.pipelined import ClaimFilter
from tests.conftest import deterministic_vllm_settings
from tests.pandas import programs
from tests.pandas.programs import PROGRAMS

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module", params=["sim", pytest.param("vllm", marks=pytest.mark.vllm)])
def engine_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """One session per engine for the module, without the result cache (so that the
    operator-at-a-time run computes its answers again)."""
    if request.param == "sim":
        kalypso.configure(
            engine=SimEngine("smollm2-cpu-f32"), result_cache=False, progress=False, max_tokens=24
        )
    else:
        settings = deterministic_vllm_settings(96, max_num_seqs=8)
        kalypso.configure(
            engine=EngineSpec(kind="vllm", settings=settings),
            result_cache=False,
            progress=False,
            max_tokens=24,
        )
    try:
        yield request.param
    finally:
        kalypso.pandas.close()


def one_at_a_time(program: programs.Program, monkeypatch: pytest.MonkeyPatch) -> object:
    """``program`` with every semantic call run at once, as Lotus runs it."""
    original = accessors.deliver

    def eager(chain: object, return_stats: bool) -> object:
        result = original(chain, return_stats)  # type: ignore[arg-type]
        return result.collect() if isinstance(result, kalypso.pandas.LazyFrame) else result

    with monkeypatch.context() as patched:
        patched.setattr(accessors, "deliver", eager)
        return program()


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(frame)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_gives_lotus_columns_and_the_same_answers_as_one_operator_at_a_time(
    engine_kind: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    program, columns = PROGRAMS[name]
    pipelined = program()
    assert isinstance(pipelined, pd.DataFrame)
    assert list(pipelined.columns) == columns
    alone = one_at_a_time(program, monkeypatch)
    pd.testing.assert_frame_equal(plain(pipelined), plain(alone))  # type: ignore[arg-type]


def test_row_labels_and_counts_are_lotus_s(engine_kind: str) -> None:
    kept = programs.filter_courses()
    assert set(kept.index) <= set(programs.COURSES.index)
    assert list(kept["Course Name"]) == list(programs.COURSES.loc[kept.index, "Course Name"])
    flagged = programs.filter_courses_all()
    assert list(flagged.index) == list(programs.COURSES.index)
    assert flagged["_filter"].dtype == bool
    assert list(flagged.index[flagged["_filter"]]) == list(kept.index)
    assert set(flagged["explanation_filter"]) == {""}
    top = programs.topk_courses()
    assert list(top.index) == [0, 1]
    assert set(top["Course Name"]) <= set(programs.COURSES["Course Name"])
    agg = programs.agg_abstracts()
    assert agg.shape == (1, 1) and list(agg.index) == [0]
    groups = programs.agg_by_field()
    assert sorted(groups["field"]) == ["biology", "earth", "ml"] and list(groups.index) == [0, 0, 0]
    joined = programs.join_courses_skills()
    assert list(joined.index) == list(range(len(joined)))
    assert len(joined) <= len(programs.COURSES) * len(programs.SKILLS)
    similar = programs.sim_join_courses_skills()
    assert list(similar.index) == list(programs.COURSES.index)
    assert similar["_scores"].between(-1, 1).all()
    found = programs.search_abstracts()
    assert len(found) == 2 and found["vec_scores_sim_score"].is_monotonic_decreasing
    assert found.index[0] == 0  # the abstract about language models


def test_filter_keeps_the_rows_the_kalypso_plan_keeps(engine_kind: str) -> None:
    """The decisions are Kalypso's: the same rows as the table API's plan deciding the
    claim True or False."""
    kept = programs.filter_courses()
    session = kalypso.pandas.current()
    plan = kalypso.table(programs.COURSES.reset_index(drop=True)).apply(
        ClaimFilter("{Course Name} requires a lot of math")
    )
    direct = session.call(plan.arun(session.engine, progress=False, layout=session.layout))
    assert list(kept["Course Name"]) == list(direct.frame["Course Name"])


def test_three_chained_operators_run_as_one_plan_reusing_the_prefix(engine_kind: str) -> None:
    """Two maps and a filter over the abstracts: one plan, one pipeline; the second and
    third calls of a row find its abstract cached (all of it on the simulator; on vLLM at
    least 90%, the cache holding every abstract)."""
    papers = programs.ABSTRACTS.assign(abstract=programs.ABSTRACTS["abstract"] * 8)  # blocks
    frame = (
        papers.sem_map("Summarize the {abstract} in five words.", suffix="summary")
        .sem_map("Name the method in the {abstract}.", suffix="method")
        .sem_filter("The {abstract} reports a measurement")
    )
    assert isinstance(frame, kalypso.pandas.LazyFrame) and frame.pending
    assert frame.chain is not None
    assert [op.kind for op in frame.chain.table.operators] == ["sem_map", "sem_map", "sem_filter"]
    assert "Pipeline 1" in frame.explain() and "Pipeline 2" not in frame.explain()
    len(frame)  # runs the plan
    result = frame.result
    assert result is not None and not frame.pending
    assert len(result.pipeline_reports) == 1
    assert result.llm_calls == 3 * len(programs.ABSTRACTS)
    first, *later = result.operator_stats
    assert first.cached_tokens == 0 or engine_kind == "vllm"
    assert all(s.cached_tokens > 0 for s in later), result.report()
    assert result.dependent_hit_rate >= (1.0 if engine_kind == "sim" else 0.9), result.report()
