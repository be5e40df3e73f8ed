"""A workflow's plan and its ``explain()``, the CLI's ``kalypso workflow explain``, and the
warm-up of ``cacheable`` calls' known prefixes - on the simulator, exact."""

from __future__ import annotations

import pandas as pd
import pytest

from kalypso import PlanError
from kalypso import workflow as wf
from kalypso.cli import main
from kalypso.core.policies import get_policy
from kalypso.core.policies.base import Policy
from kalypso.engine.sim import SimEngine
from kalypso.workflow.library import workload
from tests.engine.failing_sim import FailingOneSim
from tests.workflow.flows import read_then_answer
from tests.workflow.recording_sim import OUTPUTS, RecordingSim

DOCS = [
    f"Filing {i}. " + " ".join(f"line {i}.{j} of the filing" for j in range(30)) for i in range(4)
]
QUESTIONS = [f"What happened in year {2020 + i}?" for i in range(4)]


INPUTS = {"doc": DOCS, "question": QUESTIONS}
SMALL_WARM = wf.WorkflowOptions(warm_min_tokens=32)


async def test_explain_shows_the_dag_the_rewrites_the_tree_and_the_schedule() -> None:
    engine = RecordingSim()
    question = wf.input("question")
    conversation = wf.chat(wf.user("Say: ", question))
    first = wf.llm(conversation, max_tokens=6, name="first")
    copy = wf.llm(wf.chat(wf.user("Say: ", question)), max_tokens=6, name="copy")
    again = wf.llm(conversation.then(first).user("More."), max_tokens=6, name="again")
    flow = wf.Workflow({"a": first, "b": copy, "c": again}, name="small")
    try:
        text = wf.plan(flow, engine, {"question": QUESTIONS}).explain()
    finally:
        await engine.close()
    assert engine.requests == []  # planning sends nothing
    assert text.startswith("workflow plan 'small': 4 queries on sim:")
    assert "256 KV blocks of 16 tokens" in text
    assert text.splitlines()[1] == f"engine cost model: {engine.cost_model.explain()}"
    assert "merged copy into first (same greedy call)" in text
    assert "llm      again  <- input, first" in text
    assert "generate: max_tokens=6, greedy, continues first" in text
    assert "templated radix tree (tokens, [slot]s):" in text
    assert "schedule (policy cache-aware):" in text
    assert "  instance window: " in text and "conversation group 0: again, first" in text
    assert "  cache-aware order (inner sequence: operators):" in text


async def test_explain_of_trading_lists_its_groups_and_window() -> None:
    job = workload("trading", "small")
    engine = SimEngine("smollm2-cpu-f32", num_blocks=44, block_size_tokens=32, max_num_seqs=16)
    try:
        text = wf.plan(job.workflows[-1], engine, job.inputs[-1], system_prompt="").explain()
    finally:
        await engine.close()
    assert "instance window: 2 conversation groups in flight" in text
    assert "conversation group 0: bear_r0, bear_r1, bull_r0, bull_r1" in text
    assert "31 distinct LLM calls per query" in text


BUILT_IN = (
    "adaptive",
    "all-ready",
    "cache-aware",
    "helium",
    "lspf",
    "operator-at-a-time",
    "opwise",
    "opwise-stream",
    "parallel-bfs",
    "parallel-dfs",
    "pipelined",
    "querywise",
    "sequential",
    "static:0.3",
)


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_policy_explains_itself_in_its_own_words(name: str) -> None:
    policy = get_policy(name)
    assert policy.explain() != Policy().explain()


async def test_options_and_their_fields_together_are_refused() -> None:
    engine = RecordingSim()
    try:
        with pytest.raises(PlanError, match="not both: \\['policy'\\]"):
            await wf.arun(
                read_then_answer(cacheable=False),
                engine,
                INPUTS,
                wf.run.RunOptions(system_prompt=""),
                policy="querywise",
            )
    finally:
        await engine.close()
    assert engine.requests == []


async def _run(flow: wf.Workflow, engine: RecordingSim) -> wf.WorkflowResult:
    try:
        return await wf.arun(
            flow, engine, INPUTS, system_prompt="", query_id="w", workflow_options=SMALL_WARM
        )
    finally:
        await engine.close()


async def test_a_cacheable_calls_document_is_warmed_before_it_can_run() -> None:
    """Each query's document is prefilled by a warm-up before ``brief`` answers, so
    ``answer`` finds it cached: it computes that many tokens fewer than the same
    workflow without ``cacheable``, with the same outputs."""
    plain_engine, warm_engine = RecordingSim(), RecordingSim()
    plain = await _run(read_then_answer(cacheable=False), plain_engine)
    warm = await _run(read_then_answer(cacheable=True), warm_engine)
    pd.testing.assert_frame_equal(plain.outputs, warm.outputs)
    assert not [r for r in plain_engine.requests if ":warm:" in r.request_id]
    warmed = [r for r in warm_engine.requests if ":warm:" in r.request_id]
    answers = [r for r in warm_engine.requests if r.request_id.startswith("w:answer:")]
    assert len(warmed) == len(answers) == 4
    for prefix in warmed:
        length = len(prefix.prompt_token_ids)
        (call,) = [a for a in answers if a.prompt_token_ids[:length] == prefix.prompt_token_ids]
        assert prefix.max_tokens == 1 and prefix.priority > call.priority
        assert length % 16 == 0 and length > 160  # whole blocks of a document
        assert warm_engine.results[call.request_id].cached_tokens >= length
    warmed_tokens = sum(len(r.prompt_token_ids) for r in warmed)
    plain_answer = next(s for s in plain.operator_stats if s.operator == "answer")
    warm_answer = next(s for s in warm.operator_stats if s.operator == "answer")
    assert warm_answer.cached_tokens == warmed_tokens == 960  # every warmed token is reused
    assert plain_answer.cached_tokens == 48  # the system prompt the four queries share
    assert plain_answer.prefill_tokens - warm_answer.prefill_tokens == 960 - 48
    assert warm.warm is not None
    assert (warm.warm.prefixes, warm.warm.tokens) == (4, warmed_tokens)
    # the run computes the documents in its warm-ups instead (their first block, the
    # shared system prompt, once): its prefill counts them, and it is the same
    assert warm.warm.cached_tokens == 48
    assert warm.prefill_tokens == plain.prefill_tokens


async def test_known_prefixes_are_warmed_only_while_half_the_cache_holds_them() -> None:
    """Each document is 13 blocks of 16 tokens: half of a 40-block cache holds one."""
    engine = RecordingSim(num_blocks=40)
    try:
        planned = wf.plan(
            read_then_answer(cacheable=True),
            engine,
            INPUTS,
            system_prompt="",
            workflow_options=SMALL_WARM,
        )
        assert "1 known prefixes of cacheable calls" in planned.explain()
        assert "3 more left out for room" in planned.explain()
    finally:
        await engine.close()


async def test_a_failed_warm_up_costs_nothing_but_its_count() -> None:
    engine = FailingOneSim(
        "qwen3-8b-h100",
        num_blocks=256,
        block_size_tokens=16,
        outputs=OUTPUTS,
        fail_request_id="w:warm:2",
    )
    try:
        result = await wf.arun(
            read_then_answer(cacheable=True),
            engine,
            INPUTS,
            system_prompt="",
            query_id="w",
            workflow_options=SMALL_WARM,
        )
        stats = await engine.stats()
    finally:
        await engine.close()
    assert result.warm is not None and (result.warm.prefixes, result.warm.failed) == (3, 1)
    assert len(result.outputs) == 4 and result.outputs["answer"].notna().all()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)


def test_the_cli_explains_without_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workflow", "explain", "debate", "--engine", "sim"]) == 0
    err = capsys.readouterr().err
    assert "workflow plan 'debate': 8 queries on sim:qwen3-8b-h100" in err
    assert "schedule (policy cache-aware):" in err
    assert "per node" not in err  # nothing ran


def test_the_cli_explains_then_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["workflow", "run", "mapred", "--engine", "sim", "--no-progress", "--explain"])
    assert code == 0
    err = capsys.readouterr().err
    assert err.index("workflow plan 'mapred'") < err.index("per node")


async def test_a_workflow_without_a_policy_runs_cache_aware() -> None:
    """Options that choose no policy get the front end's own: ``cache-aware`` here,
    ``adaptive`` for relational plans."""
    engine = RecordingSim()
    flow = read_then_answer(cacheable=False)
    try:
        given = wf.plan(flow, engine, INPUTS, wf.run.RunOptions(system_prompt=""))
        keywords = wf.plan(flow, engine, INPUTS, system_prompt="")
        chosen = wf.plan(flow, engine, INPUTS, system_prompt="", policy="querywise")
    finally:
        await engine.close()
    assert (given.policy.name, keywords.policy.name) == ("cache-aware", "cache-aware")
    assert chosen.policy.name == "querywise"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: wf.plan(read_then_answer(cacheable=False), None, INPUTS), "runs on an engine"),
        (lambda e: wf.plan(read_then_answer(cacheable=False), SimEngine, INPUTS), "runs on an"),
        (lambda e: wf.plan("flow", e, INPUTS), "expected a Workflow or a list of them"),
        (lambda e: wf.plan([], e, INPUTS), "expected a Workflow or a list of them"),
        (
            lambda e: wf.plan(read_then_answer(cacheable=False), e, INPUTS, {"policy": "x"}),
            "options must be a RunOptions",
        ),
        (
            lambda e: wf.plan(read_then_answer(cacheable=False), e, {"doc": DOCS}),
            "missing \\['question'\\]",
        ),
        (
            lambda e: wf.plan(read_then_answer(cacheable=False), e, INPUTS, policy="nope"),
            "unknown execution policy 'nope'",
        ),
    ],
)
async def test_bad_plans_are_refused_before_anything_is_sent(call, message: str) -> None:  # type: ignore[no-untyped-def]
    engine = RecordingSim()
    try:
        with pytest.raises(PlanError, match=message):
            call(engine)
    finally:
        await engine.close()
    assert engine.requests == []
