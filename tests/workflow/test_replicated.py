"""Workflows on a replica set of simulated engines (one virtual time): the outputs equal
the one-engine run's; questions about one context stay on one replica; a replica that
dies mid-run loses and repeats nothing."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from kalypso import workflow as wf
from kalypso.core.errors import PlanError
from kalypso.core.replicas import ReplicaSet
from kalypso.engine.sim.clock import SharedClock
from kalypso.engine.sim.engine import SimEngine
from kalypso.engine.sim.tokenizer import WordTokenizer
from kalypso.workflow.replicated import query_units


def context_workflow() -> wf.Workflow:
    context, question = wf.input("context"), wf.input("question")
    chat = wf.chat(wf.system("Read the context."), wf.user(context, "\nQuestion: ", question))
    first = wf.llm(chat, max_tokens=12, name="first")
    check = wf.llm(chat.then(first).user("Check it."), max_tokens=12, name="check")
    return wf.Workflow({"answer": check}, name="context-qa")


def batch(contexts: int, questions: int) -> dict[str, list[str]]:
    return {
        "context": [
            f"Context {c}: " + " ".join(f"fact{c}_{k}" for k in range(60))
            for c in range(contexts)
            for _ in range(questions)
        ],
        "question": [f"What is fact {q}?" for _ in range(contexts) for q in range(questions)],
    }


def replica_engines(count: int) -> list[SimEngine]:
    clock = SharedClock()
    return [SimEngine("qwen3-8b-h100", clock=clock) for _ in range(count)]


@pytest.mark.asyncio
async def test_three_replicas_give_the_one_engine_outputs() -> None:
    inputs = batch(6, 4)
    alone = await wf.arun(context_workflow(), SimEngine("qwen3-8b-h100"), inputs)
    replicas = ReplicaSet(replica_engines(3))
    spread = await wf.arun(context_workflow(), replicas, inputs)
    pd.testing.assert_frame_equal(spread.outputs, alone.outputs)
    assert spread.llm_calls == alone.llm_calls
    assert sum(r.units_done for r in replicas.replicas) == 24
    assert all(len(r.warm) == 2 for r in replicas.replicas)  # two contexts each


def test_questions_about_one_context_share_an_affinity_key() -> None:
    units = query_units(batch(3, 2))
    assert [u.affinity == units[0].affinity for u in units] == [True, True] + [False] * 4
    assert query_units({"question": ["a", "b"]})[0].affinity is None  # nothing repeats


@pytest.mark.asyncio
async def test_a_replica_dying_mid_run_loses_and_repeats_nothing() -> None:
    inputs = batch(8, 4)
    alone = await wf.arun(context_workflow(), SimEngine("qwen3-8b-h100"), inputs)
    engines = replica_engines(2)
    replicas = ReplicaSet(engines)
    running = asyncio.create_task(wf.arun(context_workflow(), replicas, inputs))
    while engines[1].num_steps < 5:
        await asyncio.sleep(0)
    await engines[1].close()
    spread = await running
    pd.testing.assert_frame_equal(spread.outputs, alone.outputs)
    assert not replicas.replicas[1].alive
    assert sum(r.units_done for r in replicas.replicas) == 32


@pytest.mark.asyncio
async def test_a_replica_set_takes_no_ledger_or_queries() -> None:
    with pytest.raises(PlanError, match="no ledger"):
        await wf.arun(context_workflow(), ReplicaSet(replica_engines(2)), batch(1, 1), queries=[0])


@pytest.mark.asyncio
async def test_an_idle_replica_takes_back_queries_a_slow_one_has_not_started() -> None:
    """Replica 1 runs the CPU profile (steps ten times as long); under a policy that
    starts one query at a time, replica 0, done first, takes back whole contexts that
    replica 1 has not started: the same outputs, each query once. (``cache-aware``
    starts every query's first call at once, and started queries stay.)"""
    inputs = batch(12, 3)
    alone = await wf.arun(context_workflow(), SimEngine("qwen3-8b-h100"), inputs)
    clock, tokenizer = SharedClock(), WordTokenizer()
    fast = SimEngine("qwen3-8b-h100", clock=clock, tokenizer=tokenizer)
    slow = SimEngine("smollm2-cpu", clock=clock, tokenizer=tokenizer)
    replicas = ReplicaSet([fast, slow])
    spread = await wf.arun(context_workflow(), replicas, inputs, policy="querywise")
    pd.testing.assert_frame_equal(spread.outputs, alone.outputs)
    assert spread.llm_calls == alone.llm_calls
    taker, slowed = replicas.replicas
    assert taker.stolen_units > 0 and taker.stolen_units % 3 == 0  # whole contexts
    assert taker.units_done == 18 + taker.stolen_units
    assert slowed.units_done == 18 - taker.stolen_units
    assert all(r.ledger.reserved_blocks == 0 and not r.ledger.owners for r in replicas.replicas)
