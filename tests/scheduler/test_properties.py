"""Property tests of the scheduler on the simulator: random small tables, selectivities,
fan-outs, KV capacities and policies. A run must return exactly operator-at-a-time's
table (no tuple lost or duplicated), admit every task once plus once per retry, keep the
ledger within capacity and leave it empty - and it must terminate: a run that could
never progress again raises :class:`SchedulerDeadlock` at once (no timeout). Runs that
deadlock are a known bug (the liveness test is marked xfail with the two minimal
scenarios hypothesis found); the other properties are checked on every run that ends.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from kalypso.scheduler.memory import KVLedger
from tests.scheduler.factories import RecordingSim, SchedulerDeadlock, notes, right_table

POLICIES = ("adaptive", "parallel-dfs", "parallel-bfs", "static:0.3", "static:0.7", "sequential")


@dataclass(frozen=True)
class Scenario:
    words: tuple[int, ...]
    """Words of each note (the table's size is their count)."""
    yes_rate: float
    fanout: int
    second_fanout: int | None
    """A second join (three stages) when given."""
    with_map: bool
    """A sem_map with a small first bound in the last stage (retries)."""
    num_blocks: int
    policy: str

    def plan(self) -> Table:
        plan = (
            kalypso.table(notes(len(self.words), list(self.words)), name="notes")
            .sem_filter("Is the {text} relevant?")
            .sem_join(right_table("aspect", self.fanout), "Does the {aspect} hold for the {text}?")
        )
        if self.second_fanout is not None:
            plan = plan.sem_join(
                right_table("topic", self.second_fanout),
                "Is the {text} with {aspect} about {topic}?",
            )
        if self.with_map:
            plan = plan.sem_map(
                "Summarize the {text}.", "summary", max_tokens=32, first_bound_tokens=8
            )
        return plan

    def engine(self) -> RecordingSim:
        outputs = SimOutputModel(yes_rate=self.yes_rate, min_output_tokens=2, max_output_tokens=24)
        return RecordingSim(num_blocks=self.num_blocks, outputs=outputs)


scenarios = st.builds(
    Scenario,
    words=st.lists(st.integers(3, 40), min_size=1, max_size=6).map(tuple),
    yes_rate=st.sampled_from([0.0, 0.3, 0.6, 1.0]),
    fanout=st.integers(1, 4),
    second_fanout=st.none() | st.integers(1, 3),
    with_map=st.booleans(),
    # the largest call (prompt and bound) needs 11 blocks: every task fits the cache
    num_blocks=st.integers(16, 96),
    policy=st.sampled_from(POLICIES),
)


async def run(scenario: Scenario) -> tuple[QueryResult, QueryResult, KVLedger] | None:
    """The scenario's policy and operator-at-a-time on fresh engines; None if the
    scheduler deadlocked."""
    engine, baseline_engine = scenario.engine(), scenario.engine()
    ledger = KVLedger(engine.capacity.num_blocks)
    try:
        result = await scenario.plan().arun(engine, policy=scenario.policy, ledger=ledger)
        baseline = await scenario.plan().arun(baseline_engine, policy="operator-at-a-time")
    except SchedulerDeadlock:
        return None
    finally:
        await engine.close()
        await baseline_engine.close()
    return result, baseline, ledger


SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.mark.usefixtures("schedulers")
@SETTINGS
@given(scenarios)
def test_every_policy_returns_operator_at_a_times_table_within_capacity(
    scenario: Scenario,
) -> None:
    outcome = asyncio.run(run(scenario))
    if outcome is None:
        reject()  # a known deadlock: see the liveness test below
    result, baseline, ledger = outcome

    assert result.frame.equals(baseline.frame)
    assert ledger.peak_reserved_blocks <= ledger.capacity_blocks
    assert ledger.reserved_blocks == 0
    (report,) = result.pipeline_reports
    assert report.peak_reserved_blocks == ledger.peak_reserved_blocks
    # each task admitted once, plus once per retry
    admitted = Counter(report.admitted)
    assert sum(admitted.values()) == len(admitted) + report.retries
    assert report.retries == result.retries
    # every kept note spawned exactly its pairs, each admitted
    stats = {s.operator: s for s in result.operator_stats}
    assert stats["1:sem_filter"].rows_in == len(scenario.words)
    pairs = stats["2:cartesian_product"].rows_out
    assert pairs == stats["1:sem_filter"].rows_out * scenario.fanout
    assert len([key for key in admitted if key[0] == 1]) == pairs
    # budgets are conserved and never below the minimums
    assert sum(report.final_budgets_blocks) == sum(report.initial_budgets_blocks)
    for final, minimum in zip(report.final_budgets_blocks, report.min_budgets_blocks, strict=True):
        assert final >= minimum


@pytest.mark.xfail(
    strict=True,
    reason="BUG pipeline.py _launch stage_idle ignores held prefixes, and memory.py"
    " MemoryManager.admits' idle-query rule needs an empty ledger: an idle query holding"
    " every reserved block polls forever (see test_algorithm1's liveness tests)",
)
@pytest.mark.usefixtures("schedulers")
@SETTINGS
# an idle stage 0, then an idle stage 1, take the last stage's room for prefixes
@example(Scenario((8, 20), 1.0, 2, 1, with_map=False, num_blocks=16, policy="adaptive"))
# triples of note 1 need 4 blocks; the sampled minimum (from note 0's pairs) is 3
@example(Scenario((3, 8, 4), 0.6, 2, 1, with_map=False, num_blocks=18, policy="adaptive"))
@given(scenarios)
def test_every_run_terminates(scenario: Scenario) -> None:
    assert asyncio.run(run(scenario)) is not None
