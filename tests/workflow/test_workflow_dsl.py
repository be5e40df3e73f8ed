"""The workflow DSL and its lowering: laziness, validation, token-exact continuation,
greedy-only merging, branches, fan-in - on the simulator, exact."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from kalypso import KVLedger, PlanError, QueryError
from kalypso import workflow as wf
from kalypso.core.graph import LLMNode
from kalypso.workflow.lower import lower
from tests.workflow.flows import debate
from tests.workflow.recording_sim import RecordingSim

QUESTIONS = {"question": [f"What is {i} plus {i}?" for i in range(4)]}


def test_nothing_runs_while_writing_and_the_workflow_holds_only_what_outputs_need() -> None:
    question = wf.input("question")
    used = wf.llm(wf.user(question), max_tokens=4, name="used")
    wf.llm(wf.user(question, " unused"), max_tokens=4, name="unused")  # no output reads it
    flow = wf.Workflow({"out": used})
    assert [c.name for c in flow.llm_calls] == ["used"]
    assert flow.inputs == ["question"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: wf.fmt("{x}"), "needs a value for"),
        (lambda: wf.fmt("{}", "a", "b"), "does not use"),
        (lambda: wf.fmt("{x:>4}", x="a"), "format specs"),
        (lambda: wf.fmt("{", x="a"), "bad template"),
        (lambda: wf.llm(wf.user("q"), max_tokens=0), "max_tokens must be a positive"),
        (lambda: wf.llm(wf.user("q"), max_tokens=True), "max_tokens must be a positive"),
        (lambda: wf.llm(wf.user("q"), max_tokens=4, greedy=False), "temperature > 0"),
        (lambda: wf.llm(wf.user("q"), max_tokens=4, choices="yes"), "choices must be a list"),
        (lambda: wf.llm(wf.user("q"), max_tokens=4, name="a b"), "identifier"),
        (lambda: wf.llm("q", max_tokens=4), "expected a conversation"),  # type: ignore[arg-type]
        (lambda: wf.llm(wf.chat(wf.user("q"), wf.assistant("a")), max_tokens=4), "add a user turn"),
        (lambda: wf.user(), "needs content"),
        (lambda: wf.user(3), "expected text"),  # type: ignore[arg-type]
        (lambda: wf.chat(), "one or more messages"),
        (lambda: wf.input("a-b"), "identifier"),
        (lambda: wf.fn(3), "not callable"),  # type: ignore[arg-type]
        (lambda: wf.Workflow({}), "at least one output"),
        (lambda: wf.Workflow({"x": "text"}), "expected a workflow value"),  # type: ignore[dict-item]
        (lambda: wf.loop(0, lambda i, s: s, None), "rounds must be a positive"),
    ],
)
def test_bad_workflows_are_refused_when_written(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlanError, match=message):
        build()


def test_then_needs_the_reply_made_on_that_conversation() -> None:
    a = wf.chat(wf.user("one"))
    b = wf.chat(wf.user("two"))
    reply = wf.llm(a, max_tokens=4)
    with pytest.raises(PlanError, match="another conversation"):
        b.then(reply)


async def test_bad_batches_are_refused_before_any_call() -> None:
    engine = RecordingSim()
    flow = debate()
    for inputs, message in [
        ({}, "missing \\['question'\\]"),
        ({"question": ["a"], "other": ["b"]}, "unknown \\['other'\\]"),
        ({"question": "a question"}, "not a single string"),
        ({"question": []}, "empty"),
        ({"question": [3]}, "expected text"),
        ({"question": ["\ud800"]}, "invalid text"),
    ]:
        with pytest.raises(PlanError, match=message):
            await wf.arun(flow, engine, inputs)
    with pytest.raises(PlanError, match="unknown execution policy"):
        await wf.arun(flow, engine, QUESTIONS, policy="nope")
    assert engine.requests == []
    await engine.close()


async def test_a_continued_conversation_extends_the_replys_prompt_and_answer_token_for_token() -> (
    None
):
    engine = RecordingSim()
    await wf.arun(debate(), engine, QUESTIONS, query_id="w")
    by_id = {
        r.request_id.split(":")[1] + ":" + r.request_id.split(":")[2]: r for r in engine.requests
    }
    first = by_id["a0_r0:0"]
    second = by_id["a0_r1:0"]
    answer = engine.results[first.request_id].output_token_ids
    eos = engine.tokenizer.eos_token_id
    answer = answer[:-1] if answer and answer[-1] == eos else answer
    shared = first.prompt_token_ids + answer
    assert second.prompt_token_ids[: len(shared)] == shared
    await engine.close()


async def test_round_two_finds_round_one_in_the_prefix_cache() -> None:
    engine = RecordingSim()
    result = await wf.arun(debate(), engine, QUESTIONS)
    for name in ("a0_r1", "a1_r1", "a2_r1"):
        stats = next(s for s in result.operator_stats if s.operator == name)
        assert stats.dependent_calls == 4 and stats.lost_prefixes == 0
    assert result.prefill_tokens == result.min_prefill_tokens
    await engine.close()


async def test_every_policy_returns_the_same_outputs() -> None:
    outputs = []
    for policy in ("cache-aware", "querywise", "opwise", "opwise-stream", "all-ready", "adaptive"):
        engine = RecordingSim(num_blocks=24)
        result = await wf.arun(debate(), engine, QUESTIONS, policy=policy)
        outputs.append(result.outputs)
        await engine.close()
    for other in outputs[1:]:
        pd.testing.assert_frame_equal(other, outputs[0])


def test_greedy_copies_are_merged_sampled_ones_never() -> None:
    question = wf.input("question")
    greedy = [wf.llm(wf.user(question), max_tokens=4, name=f"g{i}") for i in range(3)]
    sampled = [
        wf.llm(wf.user(question), max_tokens=4, greedy=False, temperature=0.7, name=f"s{i}")
        for i in range(2)
    ]
    flow = wf.Workflow(
        {
            **{f"g{i}": g for i, g in enumerate(greedy)},
            **{f"s{i}": s for i, s in enumerate(sampled)},
        }
    )
    lowered = lower([flow])
    calls = [n.node_id for n in lowered.graph.nodes if isinstance(n, LLMNode)]
    assert calls == ["g0", "s0", "s1"]
    assert lowered.canon.rewrites.merged == [("g1", "g0"), ("g2", "g0")]
    assert [
        n.node_id for n in lower([flow], merge=False).graph.nodes if isinstance(n, LLMNode)
    ] == ["g0", "g1", "g2", "s0", "s1"]


async def test_merged_calls_answer_for_their_copies() -> None:
    question = wf.input("question")
    copies = {f"c{i}": wf.llm(wf.user(question), max_tokens=6, name=f"c{i}") for i in range(3)}
    engine = RecordingSim()
    result = await wf.arun(wf.Workflow(copies), engine, QUESTIONS)
    assert len(engine.requests) == 4  # one call per query, not three
    assert (result.outputs["c0"] == result.outputs["c2"]).all()
    await engine.close()


async def test_the_result_cache_answers_a_repeated_prompt_without_the_engine() -> None:
    from kalypso.core.result_cache import PromptResultCache

    question = wf.input("question")
    flow = wf.Workflow({"a": wf.llm(wf.user(question), max_tokens=6, name="a")})
    engine = RecordingSim()
    cache = PromptResultCache(engine.name)
    first = await wf.arun(flow, engine, QUESTIONS, cache=cache)
    second = await wf.arun(flow, engine, QUESTIONS, cache=cache)
    assert len(engine.requests) == 4
    assert second.cache is not None and second.cache.hits == 4
    pd.testing.assert_frame_equal(first.outputs, second.outputs)
    await engine.close()


async def test_a_branch_not_taken_skips_its_calls() -> None:
    question = wf.input("question")
    answer = wf.cond(
        lambda q: "0" in q,
        [question],
        then=lambda: wf.llm(wf.user("Easy: ", question), max_tokens=4, name="easy"),
        otherwise=lambda: wf.llm(wf.user("Hard: ", question), max_tokens=4, name="hard"),
        name="pick",
    )
    engine = RecordingSim()
    result = await wf.arun(wf.Workflow({"answer": answer}), engine, QUESTIONS, query_id="w")
    names = sorted(r.request_id.split(":")[1] for r in engine.requests)
    assert names == ["easy", "hard", "hard", "hard"]  # only query 0 mentions a 0
    assert all(isinstance(a, str) and a for a in result.outputs["answer"])
    await engine.close()


async def test_fan_in_waits_for_every_input() -> None:
    question = wf.input("question")
    parts = [wf.llm(wf.user(question, f" part {i}"), max_tokens=4, name=f"p{i}") for i in range(3)]
    joined = wf.fn(lambda *xs: " | ".join(xs), *parts, name="joined")
    final = wf.llm(wf.user("Combine: ", joined), max_tokens=4, name="final")
    engine = RecordingSim()
    result = await wf.arun(
        wf.Workflow({"final": final, "joined": joined}), engine, QUESTIONS, query_id="w"
    )
    order = [
        r.request_id.split(":")[1]
        for r in engine.requests
        if r.request_id.endswith(":0") or ":0:" in r.request_id
    ]
    assert order.index("final") > max(order.index(f"p{i}") for i in range(3))
    assert all(text.count(" | ") == 2 for text in result.outputs["joined"])
    await engine.close()


async def test_a_failing_step_releases_everything_and_keeps_finished_queries() -> None:
    question = wf.input("question")
    answer = wf.llm(wf.user(question), max_tokens=4, name="answer")
    checked = wf.fn(lambda q, a: 1 / (0 if "3" in q else 1) and a, question, answer, name="check")
    engine = RecordingSim()
    ledger = KVLedger(engine.capacity.num_blocks)
    with pytest.raises(QueryError) as failure:
        await wf.arun(
            wf.Workflow({"checked": checked}), engine, QUESTIONS, ledger=ledger, policy="querywise"
        )
    assert failure.value.op_id == "check" and failure.value.key == (3,)
    assert isinstance(failure.value.__cause__, ZeroDivisionError)
    assert len(failure.value.partial.outputs) == 3
    assert ledger.reserved_blocks == 0 and ledger.owners == frozenset()
    await engine.close()


async def test_a_query_and_a_workflow_share_one_ledger_and_return_what_they_return_alone() -> None:
    import kalypso

    frame = pd.DataFrame({"text": [f"note {i} " * 20 for i in range(6)]})
    plan = (
        kalypso.table(frame)
        .sem_filter("Is the {text} relevant?")
        .sem_map("Why {text}?", "why", max_tokens=12)
    )
    alone_engine = RecordingSim(num_blocks=48)
    query_alone = await plan.arun(alone_engine)
    flow_alone = await wf.arun(debate(), alone_engine, QUESTIONS)
    await alone_engine.close()

    engine = RecordingSim(num_blocks=48)
    ledger = KVLedger(48)
    query, flow = await asyncio.gather(
        plan.arun(engine, ledger=ledger), wf.arun(debate(), engine, QUESTIONS, ledger=ledger)
    )
    pd.testing.assert_frame_equal(query.frame, query_alone.frame)
    pd.testing.assert_frame_equal(flow.outputs, flow_alone.outputs)
    assert ledger.reserved_blocks == 0
    await engine.close()
