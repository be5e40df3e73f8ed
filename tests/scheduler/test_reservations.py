"""Reservations against what the engine is really asked for.

A task reserves ``total_blocks``: its largest prompt plus output bound, minus the full
blocks it shares with its parent (the parent holds them). So every call a task makes
must fit in its reservation plus the parent's prefix blocks the call actually reuses,
and on a single chain of tasks (``sequential``, one tuple) the ledger's peak is exactly
the deepest call's blocks. These tests compare the ledger with the requests the
simulator served (:class:`RecordingSim`) and the reservations the scheduler launched
tasks with (``PipelineReport.launches``).
"""

from __future__ import annotations

import pandas as pd
import pytest

import kalypso
from kalypso.core.report import Launch, PipelineReport
from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.sim import SimOutputModel
from kalypso.query import Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import (
    RecordingSim,
    blocks,
    key_of,
    notes,
    op_of,
    right_table,
)

YES = SimOutputModel(yes_rate=1.0)


def shared_tokens(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def stage_of_ops(plan: Table) -> dict[str, int]:
    (pipeline,) = plan.physical_plan().pipelines
    return {p.op_id: s for s, stage in enumerate(pipeline.stages) for p in stage.operators}


def unreserved_calls(
    plan: Table, engine: RecordingSim, report: PipelineReport
) -> list[tuple[str, tuple[int, ...], int, int]]:
    """Requests that needed more new blocks than their task reserved:
    ``(op, key, blocks needed beyond the reused parent prefix, blocks reserved)``.

    A task's k-th launch (a continuation relaunches it) is paired with its k-th request
    of each operator; the parent's prefix a request reuses is the full blocks it shares
    with the parent tuple's last prompt, at most the parent's ``prefix_blocks``. A
    continued request is its call's prompt plus the tokens generated so far, with the
    rest of the new bound: it needs what the call needs at that bound."""
    stages = stage_of_ops(plan)
    last_prompt: dict[tuple[int, ...], tuple[int, ...]] = {}
    calls_seen: dict[tuple[str, tuple[int, ...]], int] = {}
    launches: dict[tuple[int, tuple[int, ...]], list[Launch]] = {}
    for launch in report.launches:
        launches.setdefault((launch.stage, launch.key), []).append(launch)
    bad = []
    for request in engine.requests:
        op, key = op_of(request.request_id), key_of(request.request_id)
        attempt = calls_seen.get((op, key), 0)
        calls_seen[(op, key)] = attempt + 1
        launch = launches[(stages[op], key)][attempt]
        reused = 0
        if len(key) > 1:
            parent_prompt = last_prompt[key[:-1]]
            shared = shared_tokens(parent_prompt, request.prompt_token_ids) // 16
            reused = min(shared, launch.parent_prefix_blocks)
        needed = blocks(len(request.prompt_token_ids) + request.max_tokens) - reused
        # blocks of the prompt other tasks held were shared, not reserved again
        if needed > launch.total_blocks + launch.referenced_blocks:
            bad.append((op, key, needed, launch.total_blocks))
        last_prompt[key] = request.prompt_token_ids
    return bad


def only_request(engine: RecordingSim, op: str) -> GenerateRequest:
    (request,) = engine.requests_of(op)
    return request


# --------------------------------------------------------------------------- exact sizes


async def test_a_first_stage_task_reserves_its_prompt_plus_its_bound(
    make_engine: EngineFactory,
) -> None:
    plan = kalypso.table(notes(1, 50)).sem_filter("Is the {text} relevant?")
    engine = make_engine(outputs=YES)
    result = await plan.arun(engine, policy="sequential")

    request = only_request(engine, "1:sem_filter")
    assert request.max_tokens == 1  # a decision: one constrained token
    assert request.allowed_token_ids is not None and len(request.allowed_token_ids) == 2
    # 41 (system message, start of the user turn) + 54 ([text] and 50 words) + 10 (task)
    # + 12 (end of the user turn, start of the assistant's) = 117; + 1 = 118
    assert len(request.prompt_token_ids) == 117
    (launch,) = result.pipeline_reports[0].launches
    assert launch.total_blocks == blocks(117 + 1) == 8
    assert result.peak_reserved_blocks == 8


async def test_a_chain_of_two_tasks_reserves_exactly_the_deeper_call(
    make_engine: EngineFactory,
) -> None:
    """The parent holds its 5 prefix blocks (95 tokens of [system | text]); the child's
    prompt extends them, so parent prefix + child reservation = the child's call."""
    plan = (
        kalypso.table(notes(1, 50))
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 1, words=40), "Does the {aspect} hold for the {text}?")
    )
    engine = make_engine(outputs=YES)
    result = await plan.arun(engine, policy="sequential")

    child = only_request(engine, "3:sem_join")
    parent_launch, child_launch = result.pipeline_reports[0].launches
    assert child_launch.parent_prefix_blocks == 95 // 16 == 5
    assert child_launch.total_blocks == blocks(len(child.prompt_token_ids) + 1) - 5 == 6
    assert result.peak_reserved_blocks == blocks(len(child.prompt_token_ids) + 1) == 11
    assert parent_launch.total_blocks == 8
    assert unreserved_calls(plan, engine, result.pipeline_reports[0]) == []


async def test_a_chain_of_three_tasks_reserves_exactly_the_deepest_call(
    make_engine: EngineFactory,
) -> None:
    """note -> pair -> triple, one of each. The note holds its 5 prefix blocks (95
    tokens); the pair's prefix is 8 blocks (139 tokens: the note's and a 44-token
    aspect), 3 of them its own; the triple's call needs 11 blocks (170 + 1 tokens), so
    it reserves 11 - 8 = 3. The pair reserved 6 and keeps its own 3: the ledger peaks
    at 5 + 3 + 3 = 11, the call's blocks. (Keeping min(8, 6) = 6 peaked at 14.)"""
    plan = (
        kalypso.table(notes(1, 50))
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 1, words=40), "Does the {aspect} hold for the {text}?")
        .sem_join(right_table("topic", 1), "Is the {text} with {aspect} about {topic}?")
    )
    engine = make_engine(outputs=YES)
    result = await plan.arun(engine, policy="sequential")

    deepest = only_request(engine, "5:sem_join")
    assert blocks(len(deepest.prompt_token_ids) + 1) == 11
    assert [launch.total_blocks for launch in result.pipeline_reports[0].launches] == [8, 6, 3]
    assert result.peak_reserved_blocks == 11
    assert unreserved_calls(plan, engine, result.pipeline_reports[0]) == []


# --------------------------------------------------------------------------- every call fits


def nested_plan() -> Table:
    """Every prompt extends its parent's: the join and the classifier read the text
    first, then the aspect."""
    return (
        kalypso.table(notes(12, [10 + 7 * i for i in range(12)]))
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 3, words=9), "Does the {aspect} hold for the {text}?")
        .sem_classify("How does the {text} rate the {aspect}?", ["good", "bad"], "rating")
    )


@pytest.mark.parametrize(
    "policy", ["sequential", "adaptive", "parallel-dfs", "parallel-bfs", "static:0.5"]
)
async def test_every_call_fits_its_tasks_reservation(
    make_engine: EngineFactory, policy: str
) -> None:
    plan = nested_plan()
    engine = make_engine(outputs=SimOutputModel(yes_rate=0.6))
    result = await plan.arun(engine, policy=policy)
    assert len(engine.requests) > 12
    assert unreserved_calls(plan, engine, result.pipeline_reports[0]) == []
    assert result.peak_reserved_blocks <= 64


async def test_generative_calls_fit_their_reservation_after_the_estimator_calibrates(
    make_engine: EngineFactory,
) -> None:
    """30 sem_map tasks are created (and sized with the first bound, 16 tokens) before
    any runs; each is sized again when it is admitted. Once the estimator has seen
    enough calls its bound is the observed 99th percentile (41 tokens: 40 words and end
    of sequence), but a task's requests use the bounds its reservation assumed (16, then
    the continuations' re-reserved 32 and 128; a continued request asks for the rest of
    its new bound). Calling with the estimator's bound instead gave tasks sized before it
    learned 41 tokens in a reservation made for 16."""
    plan = kalypso.table(notes(30, 30)).sem_map(
        "Describe the {text}.", "d", max_tokens=128, first_bound_tokens=16
    )
    engine = make_engine(outputs=SimOutputModel(min_output_tokens=40, max_output_tokens=40))
    result = await plan.arun(engine, policy="adaptive")
    assert unreserved_calls(plan, engine, result.pipeline_reports[0]) == []


async def test_a_child_reserves_the_blocks_it_does_not_share_with_its_parent(
    make_engine: EngineFactory,
) -> None:
    """The filter reads a 100-word title (prefix: 9 blocks); the join reads only the
    aspect, so its 69 tokens (prompt + bound, 5 blocks) share just the system prompt's 2
    full blocks with the parent. It needs 3 new blocks and reserves 5 - 2 = 3
    (subtracting the parent's whole prefix, 5 - 9, left 1)."""
    frame = pd.DataFrame({"title": [" ".join(f"t{j}" for j in range(100))]})
    plan = (
        kalypso.table(frame)
        .sem_filter("Is the {title} relevant?")
        .sem_join(pd.DataFrame({"aspect": ["cheap"]}), "Is {aspect} a word?")
    )
    engine = make_engine(outputs=YES)
    result = await plan.arun(engine, policy="sequential")
    assert [launch.total_blocks for launch in result.pipeline_reports[0].launches] == [11, 3]
    assert unreserved_calls(plan, engine, result.pipeline_reports[0]) == []


async def test_a_task_whose_prompt_does_not_extend_its_parents_keeps_its_own_prefix(
    make_engine: EngineFactory,
) -> None:
    """The note reads a 100-word title (prefix 9 blocks). The pair reads a 40-word aspect:
    its prefix, [system | aspect], is 5 blocks, of which it shares only the system
    prompt's 2 with the note; it reserves 7 - 2 = 5. The triple reads the aspect and a
    topic and reuses all 5 of the pair's blocks: it reserves 8 - 5 = 3. Of those 5, the
    note holds 2; the other 3 are the pair's, so while the triple runs the ledger must
    hold 9 + 3 + 3 = 15 (the pair keeps 5 - 9 -> 0 blocks: 12)."""
    frame = pd.DataFrame({"title": [" ".join(f"t{j}" for j in range(100))]})
    plan = (
        kalypso.table(frame)
        .sem_filter("Is the {title} relevant?")
        .sem_join(right_table("aspect", 1, words=40), "Does the {aspect} hold?")
        .sem_join(right_table("topic", 1), "Is the {aspect} about {topic}?")
    )
    engine = make_engine(outputs=YES)
    result = await plan.arun(engine, policy="sequential")

    note, pair, triple = result.pipeline_reports[0].launches
    assert (note.total_blocks, pair.total_blocks, triple.total_blocks) == (11, 5, 3)
    assert (pair.parent_prefix_blocks, triple.parent_prefix_blocks) == (9, 5)
    assert unreserved_calls(plan, engine, result.pipeline_reports[0]) == []
    assert triple.ledger_blocks == 9 + 3 + 3
