"""Generative calls that reach their output bound are *continued*, never retried: the
scheduler re-admits the task (front of its stage's queue) with a doubled bound and a new
reservation, and the next request is the call's prompt followed by every token generated
so far, asking only for the rest of the new bound. The answer is the one an
uninterrupted call gets.

Every free-text answer here is exactly 40 words, then end of sequence (41 tokens); the
sem_map's bounds go 16 -> 32 -> its cap (64, or 128 in the estimator tests) with the
default ``max_continuations=2``: the last continuation runs at the cap.
"""

from __future__ import annotations

import pytest

import kalypso
from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimOutputModel
from kalypso.query import CartesianProduct, QueryResult, Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import (
    CheckingLedger,
    RecordingSim,
    check_run,
    key_of,
    notes,
    right_table,
)

LONG_ANSWERS = SimOutputModel(yes_rate=0.5, min_output_tokens=40, max_output_tokens=40)
POLICIES = ["adaptive", "parallel-dfs", "parallel-bfs", "static:0.5", "sequential"]


def filter_join_describe() -> Table:
    """Notes 0 and 3 pass the filter; the pairs (0, 0) and (0, 1) pass the join and are
    described; (3, 0) and (3, 1) are rejected by the join and never reach the map."""
    return (
        kalypso.table(notes(4, 10), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
        .sem_map("Describe the {text} and {aspect}.", "d", max_tokens=64, first_bound_tokens=16)
    )


def stats(result: QueryResult) -> dict[str, tuple[int, int, int, int, int]]:
    """(rows in, rows out, calls, requests, continuations) per operator."""
    return {
        s.operator: (s.rows_in, s.rows_out, s.calls, s.requests, s.continuations)
        for s in result.operator_stats
    }


def calls_by_key(engine: RecordingSim, op: str) -> dict[tuple[int, ...], list[int]]:
    """Indexes into ``engine.requests`` of each tuple's requests to ``op``, in order."""
    found: dict[tuple[int, ...], list[int]] = {}
    for position, request in enumerate(engine.requests):
        if request.request_id.split(":")[1:3] == op.split(":"):
            found.setdefault(key_of(request.request_id), []).append(position)
    return found


def result_of(engine: RecordingSim, request: GenerateRequest) -> GenerateResult:
    (result,) = [r for r in engine.results if r.request_id == request.request_id]
    return result


async def test_operator_at_a_time_runs_every_call_at_its_cap(make_engine: EngineFactory) -> None:
    """Without memory to reserve, a call starts at its cap and is never continued."""
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await filter_join_describe().arun(engine, policy="operator-at-a-time")
    assert [r.max_tokens for r in engine.requests_of("4:sem_map")] == [64, 64]
    assert stats(result)["4:sem_map"] == (2, 2, 2, 2, 0)
    assert result.continuations == result.pipeline_reports[0].continuations == 0
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40]


async def test_a_continued_request_is_the_prompt_plus_the_tokens_generated_so_far(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(outputs=LONG_ANSWERS)
    ledger = CheckingLedger(64)
    result = await filter_join_describe().arun(
        engine, reserve_cap_when_it_fits=False, policy="sequential", ledger=ledger, query_id="q"
    )
    check_run(result, ledger)
    report = result.pipeline_reports[0]

    for key, positions in calls_by_key(engine, "4:sem_map").items():
        first, *continued = (engine.requests[p] for p in positions)
        generated: tuple[int, ...] = ()
        for previous, request in zip([first, *continued], continued, strict=False):
            assert result_of(engine, previous).finish_reason == "length"
            generated += result_of(engine, previous).output_token_ids
            # the call's own prompt, then exactly the tokens it generated so far
            assert request.prompt_token_ids == first.prompt_token_ids + generated, key
            assert request.priority == first.priority
        # the rest of the doubled bound, then the rest of the cap
        assert [r.max_tokens for r in (first, *continued)] == [16, 32 - 16, 64 - 32], key
    # only the map continues: one logical call per described pair, two continuations each
    assert stats(result)["4:sem_map"] == (2, 2, 2, 6, 4)
    assert stats(result)["3:sem_join"] == (4, 2, 4, 4, 0)  # the join is not asked again
    assert report.continuations == result.continuations == 4
    map_stats = {s.operator: s for s in result.operator_stats}["4:sem_map"]
    continued_results = [
        result_of(engine, engine.requests[p])
        for positions in calls_by_key(engine, "4:sem_map").values()
        for p in positions[1:]
    ]
    assert map_stats.continued_tokens == sum(r.output_tokens for r in continued_results)
    # sequential: a continued task goes back to the front of its queue and runs next
    assert report.admitted == [
        (0, (0,)),
        *[(1, (0, 0))] * 3,
        *[(1, (0, 1))] * 3,
        (0, (1,)),
        (0, (2,)),
        (0, (3,)),
        (1, (3, 0)),
        (1, (3, 1)),
    ]
    # each continuation re-reserves for its larger bound (beyond the note's prefix blocks)
    assert [x.total_blocks for x in report.launches if x.key == (0, 0)] == [3, 4, 6]


async def test_a_continuation_finds_its_prompt_cached(make_engine: EngineFactory) -> None:
    """Only the new tokens cost anything: a continued request finds the call's prompt
    (and the tokens generated so far, up to their last full block) in the prefix cache."""
    engine = make_engine(outputs=LONG_ANSWERS)
    await filter_join_describe().arun(engine, reserve_cap_when_it_fits=False, policy="sequential")
    for positions in calls_by_key(engine, "4:sem_map").values():
        for position in positions[1:]:
            request = engine.requests[position]
            served = result_of(engine, request)
            full_blocks = (len(request.prompt_token_ids) - 1) // 16 * 16
            assert served.cached_tokens == full_blocks


async def test_the_answer_is_the_uninterrupted_calls(make_engine: EngineFactory) -> None:
    """On the simulator a continued call generates exactly what one call at the cap does:
    the concatenated outputs of its requests are the uninterrupted call's output."""
    uninterrupted = make_engine(outputs=LONG_ANSWERS)
    baseline = await filter_join_describe().arun(uninterrupted, policy="operator-at-a-time")
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await filter_join_describe().arun(
        engine, reserve_cap_when_it_fits=False, policy="sequential"
    )

    assert result.frame.equals(baseline.frame)
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40]
    whole = {
        key_of(r.request_id): result_of(uninterrupted, r).output_token_ids
        for r in uninterrupted.requests_of("4:sem_map")
    }
    for key, positions in calls_by_key(engine, "4:sem_map").items():
        pieces = [result_of(engine, engine.requests[p]).output_token_ids for p in positions]
        assert sum(pieces, ()) == whole[key]


@pytest.mark.parametrize("policy", POLICIES)
async def test_every_policy_continues_and_returns_operator_at_a_times_answers(
    make_engine: EngineFactory, policy: str
) -> None:
    baseline = await filter_join_describe().arun(
        make_engine(outputs=LONG_ANSWERS), policy="operator-at-a-time"
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    ledger = CheckingLedger(64)
    result = await filter_join_describe().arun(
        engine, reserve_cap_when_it_fits=False, policy=policy, ledger=ledger, query_id="q"
    )
    check_run(result, ledger)
    report = result.pipeline_reports[0]

    assert result.frame.equals(baseline.frame)
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40]
    assert report.continuations == result.continuations == 4
    assert stats(result)["4:sem_map"] == (2, 2, 2, 6, 4)
    for op in ("1:sem_filter", "3:sem_join", "4:sem_map"):  # same tuples in and out
        assert stats(result)[op][:2] == stats(baseline)[op][:2]
    # each continued task is admitted once more per continuation
    assert len(report.admitted) == 4 + 4 + 4
    assert report.peak_reserved_blocks <= 64


@pytest.mark.parametrize(
    ("max_continuations", "bounds"),
    [(0, [16, 48]), (1, [16, 48]), (2, [16, 16, 32]), (5, [16, 16, 32])],
)
async def test_the_last_continuation_goes_to_the_cap(
    make_engine: EngineFactory, max_continuations: int, bounds: list[int]
) -> None:
    """``max_continuations`` counts the continuations of a call, the last of which asks
    for everything up to the cap (so a call always ends, and its answer never depends on
    the bounds tried); doubling stops at the cap anyway."""
    plan = kalypso.table(notes(2, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(
        engine, reserve_cap_when_it_fits=False, max_continuations=max_continuations
    )
    for positions in calls_by_key(engine, "1:sem_map").values():
        assert [engine.requests[p].max_tokens for p in positions] == bounds
    assert result.continuations == 2 * (len(bounds) - 1)
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40]


async def test_a_call_cut_at_its_cap_keeps_what_the_cap_allows(make_engine: EngineFactory) -> None:
    plan = kalypso.table(notes(1, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=24, first_bound_tokens=10
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, reserve_cap_when_it_fits=False, max_continuations=5)

    assert [r.max_tokens for r in engine.requests] == [10, 20 - 10, 24 - 20]
    assert [r.finish_reason for r in engine.results] == ["length"] * 3
    assert result.continuations == 2
    assert len(result.frame["d"][0].split()) == 24  # cut at the cap: what the user asked for


@pytest.mark.parametrize(
    ("fixed_tokens", "bounds"),
    [
        pytest.param(8, [8, 8, 48]),
        pytest.param(32, [32, 32]),
        (48, [48]),
    ],
)
async def test_a_fixed_first_bound_replaces_the_estimator_and_answers_do_not_change(
    make_engine: EngineFactory, fixed_tokens: int, bounds: list[int]
) -> None:
    plan = kalypso.table(notes(2, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, fixed_bound_tokens=fixed_tokens)
    for positions in calls_by_key(engine, "1:sem_map").values():
        assert [engine.requests[p].max_tokens for p in positions] == bounds
    assert result.continuations == 2 * (len(bounds) - 1)
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40]


async def test_no_continuation_when_the_first_bound_is_the_cap(make_engine: EngineFactory) -> None:
    plan = kalypso.table(notes(2, 5)).sem_map("Describe the {text}.", "d", max_tokens=16)
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, reserve_cap_when_it_fits=False)
    assert [r.max_tokens for r in engine.requests] == [16, 16]
    assert result.continuations == 0
    assert result.llm_calls == result.requests == 2


async def test_sem_extract_continues_like_sem_map(make_engine: EngineFactory) -> None:
    plan = kalypso.table(notes(1, 5)).sem_extract(
        "Read the {text}.", ["drug"], max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, reserve_cap_when_it_fits=False)
    assert [r.max_tokens for r in engine.requests] == [16, 16, 32]
    assert result.continuations == 2


async def test_decisions_are_one_token_and_never_continued(make_engine: EngineFactory) -> None:
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await filter_join_describe().arun(engine, reserve_cap_when_it_fits=False)
    for op in ("1:sem_filter", "3:sem_join"):
        assert {r.max_tokens for r in engine.requests_of(op)} == {1}
        assert all(r.allowed_token_ids is not None for r in engine.requests_of(op))
    assert {s.operator: s.decisions for s in result.operator_stats} == {
        "1:sem_filter": 4,
        "2:cartesian_product": 0,
        "3:sem_join": 4,
        "4:sem_map": 0,
    }


# --------------------------------------------------------------------------- the estimator


async def test_the_estimator_learns_the_bound_and_later_tasks_stop_continuing(
    make_engine: EngineFactory,
) -> None:
    """30 notes, all kept; each is paired with one aspect and its pair runs a sem_map
    (alone in stage 1; its prompt reads the note). A task's requests use the bounds its
    reservation assumed, so what the estimator learns applies to tasks sized afterwards:
    the first map tasks start at 16 and are continued (to 32, then the cap), the later
    ones start at the learned bound - at least the 41 tokens every answer takes - and
    run once. Either way, every answer is the uninterrupted one."""
    plan = (
        kalypso.table(notes(30, 30))
        .sem_filter("Is the {text} relevant?")
        .apply(CartesianProduct(right_table("aspect", 1)))
        .sem_map("Describe the {text}.", "d", max_tokens=128, first_bound_tokens=16)
    )
    answers = SimOutputModel(yes_rate=1.0, min_output_tokens=40, max_output_tokens=40)
    engine = make_engine(outputs=answers)
    result = await plan.arun(engine, reserve_cap_when_it_fits=False, policy="adaptive")
    baseline = await plan.arun(make_engine(outputs=answers), policy="operator-at-a-time")

    assert result.frame.equals(baseline.frame)
    bounds = {
        key: [engine.requests[p].max_tokens for p in positions]
        for key, positions in calls_by_key(engine, "3:sem_map").items()
    }
    early = sorted(key for key, seq in bounds.items() if seq == [16, 16, 96])
    learned = sorted(key for key, seq in bounds.items() if len(seq) == 1 and seq[0] >= 41)
    assert len(early) + len(learned) == 30, bounds
    assert early == [(i, 0) for i in range(len(early))]  # the first notes' pairs
    assert learned, "later tasks should be sized with the learned bound"
    assert result.continuations == result.pipeline_reports[0].continuations == 2 * len(early)


async def test_tasks_admitted_after_the_estimator_calibrates_use_its_bound(
    make_engine: EngineFactory,
) -> None:
    """One stage: all 30 sem_map tasks exist from the start, but each is sized when it is
    admitted. Tasks admitted before the estimator has its samples reserve for the first
    bound (16 tokens) and are continued (16, 32, then the cap); tasks admitted after it
    learned the 41-token answers reserve for that bound and run once."""
    plan = kalypso.table(notes(30, 30)).sem_map(
        "Describe the {text}.", "d", max_tokens=128, first_bound_tokens=16
    )
    answers = SimOutputModel(min_output_tokens=40, max_output_tokens=40)
    engine = make_engine(outputs=answers)
    result = await plan.arun(engine, reserve_cap_when_it_fits=False, policy="adaptive")

    bounds = {
        key: [engine.requests[p].max_tokens for p in positions]
        for key, positions in calls_by_key(engine, "1:sem_map").items()
    }
    early = [key for key, seq in bounds.items() if seq == [16, 16, 96]]
    learned = [key for key, seq in bounds.items() if len(seq) == 1 and seq[0] >= 41]
    assert len(early) + len(learned) == 30, bounds
    assert len(early) >= 8  # the estimator needs 8 completed calls
    assert learned, "later tasks should be admitted with the learned bound"
    assert result.continuations == 2 * len(early)
    assert list(result.frame["d"].str.split().str.len()) == [40] * 30


async def test_the_cap_is_reserved_when_it_fits_and_nothing_is_continued(
    make_engine: EngineFactory,
) -> None:
    """With room in the stage's budget a task is sized at its calls' caps: the same
    answers, no continuation; the option off, the same plan continues its long answers."""
    roomy = {"num_blocks": 1024, "outputs": LONG_ANSWERS}
    capped = await filter_join_describe().arun(make_engine(**roomy))
    bounded = await filter_join_describe().arun(
        make_engine(**roomy), reserve_cap_when_it_fits=False
    )
    assert capped.continuations == 0 < bounded.continuations
    assert capped.frame.equals(bounded.frame)
