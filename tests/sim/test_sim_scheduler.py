"""The simulated scheduler step by step: token budget, chunked prefill, admission, preemption."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.sim.block_pool import BlockPool
from kalypso.engine.sim.kv_cache_manager import KVCacheManager
from kalypso.engine.sim.outputs import SimCompletion
from kalypso.engine.sim.request import SimRequest
from kalypso.engine.sim.scheduler import Scheduler, SchedulerConfig, StepPlan

_arrivals = itertools.count()


def make_scheduler(
    num_blocks: int = 16,
    block_size_tokens: int = 4,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 2048,
) -> Scheduler:
    kv = KVCacheManager(BlockPool(num_blocks), block_size_tokens)
    return Scheduler(kv, SchedulerConfig(max_num_seqs, max_num_batched_tokens))


def make_sim_request(
    request_id: str, prompt: Sequence[int], num_output_tokens: int, priority: int = 0
) -> SimRequest:
    output = tuple(range(900, 900 + num_output_tokens))
    return SimRequest(
        request=GenerateRequest(request_id, tuple(prompt), num_output_tokens, priority=priority),
        arrival_seq=next(_arrivals),
        arrival_s=0.0,
        completion=SimCompletion(output, "", "length"),
        block_size_tokens=4,
    )


def step(scheduler: Scheduler) -> StepPlan:
    plan = scheduler.schedule(now_s=0.0)
    scheduler.finish_step(plan, now_s=0.0)
    return plan


def test_chunked_prefill_within_the_token_budget() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=6)
    for k, request_id in enumerate("abc"):
        scheduler.add_request(make_sim_request(request_id, range(10 * k, 10 * k + 5), 2))
    plans = []
    while scheduler.has_work:
        plans.append(step(scheduler))
    assert [p.num_scheduled_tokens for p in plans] == [
        {"a": 5, "b": 1},  # a's whole prompt, the first chunk of b
        {"a": 1, "b": 4, "c": 1},  # a decodes, b finishes prefill, c starts
        {"b": 1, "c": 4},
        {"c": 1},
    ]
    assert [(p.prefill_tokens, p.decode_seqs) for p in plans] == [(6, 0), (5, 1), (4, 1), (0, 1)]


def test_max_num_seqs_limits_admission() -> None:
    scheduler = make_scheduler(max_num_seqs=2)
    for k, request_id in enumerate("abc"):
        scheduler.add_request(make_sim_request(request_id, range(10 * k, 10 * k + 4), 1))
    assert step(scheduler).num_scheduled_tokens == {"a": 4, "b": 4}
    assert step(scheduler).num_scheduled_tokens == {"c": 4}


def test_lowest_priority_running_request_is_preempted_even_if_already_scheduled() -> None:
    scheduler = make_scheduler(num_blocks=4)
    low = make_sim_request("low", range(4), 8, priority=1)
    high = make_sim_request("high", range(100, 106), 8, priority=0)
    scheduler.add_request(low)
    scheduler.add_request(high)
    plans = [step(scheduler) for _ in range(4)]
    assert [p.num_scheduled_tokens for p in plans[:3]] == [
        {"low": 4, "high": 6},
        {"low": 1, "high": 1},
        {"low": 1, "high": 1},
    ]
    # Step 4: low gets its token, then high needs a third block: low (the lowest
    # priority) is preempted and its scheduled token given back.
    assert plans[3].num_scheduled_tokens == {"high": 1}
    assert plans[3].preempted == ["low"]
    assert low.num_computed_tokens == 0 and low.num_preemptions == 1
    assert scheduler.num_waiting == 1
    assert scheduler.kv.num_blocks_held("low") == 0


def test_request_that_must_preempt_itself_stops_the_running_phase() -> None:
    scheduler = make_scheduler(num_blocks=4)
    scheduler.add_request(make_sim_request("low", range(4), 8, priority=1))
    step(scheduler)  # low runs first, so it comes first in the running order
    scheduler.add_request(make_sim_request("high", range(100, 104), 8, priority=0))
    plans = [step(scheduler) for _ in range(5)]
    assert plans[3].num_scheduled_tokens == {"low": 1, "high": 1}
    # low needs a third block and is itself the lowest priority: it is preempted and
    # nothing else runs in that step (vLLM breaks out of the running loop)
    assert plans[4].num_scheduled_tokens == {}
    assert plans[4].preempted == ["low"]
    assert step(scheduler).num_scheduled_tokens == {"high": 1}


def test_equal_priorities_preempt_the_latest_arrival() -> None:
    scheduler = make_scheduler(num_blocks=4)
    scheduler.add_request(make_sim_request("first", range(4), 8))
    scheduler.add_request(make_sim_request("second", range(100, 104), 8))
    plans = [step(scheduler) for _ in range(6)]
    assert plans[5].preempted == ["second"]
    assert plans[5].num_scheduled_tokens == {"first": 1}


def test_waiting_requests_are_admitted_by_priority_then_arrival() -> None:
    scheduler = make_scheduler(max_num_seqs=1)
    for request_id, priority in [("a", 2), ("b", 1), ("c", 2), ("d", 0)]:
        scheduler.add_request(make_sim_request(request_id, range(4), 1, priority=priority))
    admitted = [next(iter(step(scheduler).num_scheduled_tokens)) for _ in range(4)]
    assert admitted == ["d", "b", "a", "c"]


def test_prefix_cache_counters_count_first_admissions() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_sim_request("a", range(18), 1))
    step(scheduler)
    scheduler.add_request(make_sim_request("b", [*range(16), 50, 51], 1))
    step(scheduler)
    assert scheduler.prefix_cache_queries_tokens == 36
    assert scheduler.prefix_cache_hits_tokens == 16
