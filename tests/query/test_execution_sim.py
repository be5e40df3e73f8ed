"""Running plans on the simulated engine: both policies, statistics, prefix reuse,
decisions (one constrained token with its margin), blocking operators and plain Python
operators. Continuations of generative calls are tested in
``tests/scheduler/test_continuations.py``.

The simulator is deterministic (answers are a hash of the prompt; a prompt whose tail
contains "yes or no" is answered "Yes" or "No"), so tests assert exact values. Every
engine is a :class:`RecordingSim`, which keeps the requests and results it served; the
statistics of a run are checked against what the engine actually saw.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pytest

import kalypso
from kalypso.core.options import DEFAULT_SYSTEM_PROMPT
from kalypso.core.prompt import ChatLayout
from kalypso.core.stats import OperatorStats
from kalypso.datasets import reviews
from kalypso.engine.protocol import GenerateRequest, GenerateResult, Tokenizer
from kalypso.engine.sim import SimEngine, SimOutputModel, WordTokenizer
from kalypso.engine.sim.outputs import SimCompletion
from kalypso.query import IndexJoin, QueryResult, SemExtract, Table
from kalypso.query.index import VectorIndex

POLICIES = ("operator-at-a-time", "pipelined")


class RecordingSim(SimEngine):
    """The simulator, keeping every request and result, and the most requests it ever
    had in flight at once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[GenerateRequest] = []
        self.results: list[GenerateResult] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            result = await super().generate(request)
        finally:
            self.in_flight -= 1
        self.results.append(result)
        return result

    def requests_of(self, op_id: str) -> list[GenerateRequest]:
        return [r for r in self.requests if _op_of(r.request_id) == op_id]

    def answers_of(self, op_id: str) -> list[str]:
        return [r.text for r in self.results if _op_of(r.request_id) == op_id]


def _op_of(request_id: str) -> str:
    """``"q:3:sem_join:0.1:7"`` -> ``"3:sem_join"``."""
    return ":".join(request_id.split(":")[1:3])


EngineFactory = Callable[..., RecordingSim]


@pytest.fixture
async def make_engine() -> AsyncIterator[EngineFactory]:
    engines: list[RecordingSim] = []

    def make(**kwargs: Any) -> RecordingSim:
        kwargs.setdefault("num_blocks", 256)
        kwargs.setdefault("block_size_tokens", 16)
        engine = RecordingSim(**kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()


def by_op(result: QueryResult) -> dict[str, OperatorStats]:
    return {s.operator: s for s in result.operator_stats}


# --------------------------------------------------------------------------- data


@pytest.fixture(scope="module")
def review_tables() -> tuple[Table, Table]:
    """Ten bundled reviews and the eight aspect statements."""
    data = reviews.load_bundled()
    left = data.reviews.head(10)[["review_id", "product", "text"]]
    return kalypso.table(left, name="reviews"), kalypso.table(data.aspects, name="aspects")


def filter_join_map(review_tables: tuple[Table, Table]) -> Table:
    left, aspects = review_tables
    return (
        left.sem_filter("Does the {text} discuss battery life?")
        .sem_join(aspects, "Does the {aspect} hold for the {text}?")
        .sem_map("Quote the sentence of the {text} that supports the {aspect}.", "quote")
    )


def synthetic_notes(n: int, words: int) -> pd.DataFrame:
    """Notes made of words unique to each note, so notes share no tokens."""
    return pd.DataFrame(
        {
            "note_id": range(n),
            "text": [" ".join(f"w{i}x{j}" for j in range(words)) for i in range(n)],
        }
    )


@dataclass(frozen=True)
class ScoreInText(SimOutputModel):
    """Answers a sem_topk scoring prompt (a one-digit decision) with the digit after
    ``score=`` in the prompt; every other prompt as the default output model."""

    def complete(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        tokenizer: Tokenizer,
        ignore_eos: bool = False,
        stop: Sequence[str] = (),
        allowed_token_ids: Sequence[int] | None = None,
        logprobs: int | None = None,
    ) -> SimCompletion:
        prompt = tokenizer.decode(prompt_token_ids)
        if "Answer with one digit." in prompt:
            match = re.search(r"score=(\d)", prompt)
            assert match is not None
            digit = tokenizer.encode(match.group(1))[0]
            assert allowed_token_ids is not None and digit in allowed_token_ids
            return SimCompletion((digit,), match.group(1), "length")
        return super().complete(
            prompt_token_ids,
            max_tokens=max_tokens,
            tokenizer=tokenizer,
            ignore_eos=ignore_eos,
            stop=stop,
            allowed_token_ids=allowed_token_ids,
            logprobs=logprobs,
        )


# --------------------------------------------------------------------------- policies


async def test_both_policies_return_identical_frames(
    make_engine: EngineFactory, review_tables: tuple[Table, Table]
) -> None:
    plan = filter_join_map(review_tables)
    frames = {}
    for policy in POLICIES:
        result = await plan.arun(make_engine(), policy=policy)
        frames[policy] = result.frame
    blocking, pipelined = frames["operator-at-a-time"], frames["pipelined"]

    pd.testing.assert_frame_equal(blocking, pipelined)
    # the plan is selective at both predicates, so the comparison means something
    assert 0 < blocking["review_id"].nunique() < 10
    assert 0 < len(blocking) < 8 * blocking["review_id"].nunique()
    # ordered by tuple key: review order, then aspect order
    aspect_order = {a: i for i, a in enumerate(review_tables[1].source["aspect"])}
    keys = [
        (r, aspect_order[a]) for r, a in zip(blocking["review_id"], blocking["aspect"], strict=True)
    ]
    assert keys == sorted(keys)
    assert list(blocking.columns) == list(plan.columns)


def _key_of(request_id: str) -> tuple[int, ...]:
    """``"q:3:sem_join:0.1:7"`` -> ``(0, 1)``: the instance key (input row, then child)."""
    return tuple(int(part) for part in request_id.split(":")[3].split("."))


async def test_operator_at_a_time_sends_each_operator_in_row_order(
    make_engine: EngineFactory, review_tables: tuple[Table, Table]
) -> None:
    """Behind the barrier, an operator's calls go out in the row order of the table the
    previous operator materialized (review, then aspect), as Lotus sends them, not in the
    order the previous operator's calls happened to complete (which mixes reviews and
    evicts each review's prefix before all its aspects have used it)."""
    plan = filter_join_map(review_tables).sem_map("Shorten the {quote} of the {text}.", "short")
    engine = make_engine(outputs=SimOutputModel(yes_rate=1.0))
    await plan.arun(engine, policy="operator-at-a-time")
    quoted = [_key_of(r.request_id) for r in engine.results if _op_of(r.request_id) == "4:sem_map"]
    assert quoted != sorted(quoted)  # the quotes (8-48 tokens) completed out of row order...
    shortened = [_key_of(r.request_id) for r in engine.requests_of("5:sem_map")]
    assert len(shortened) == 80 and shortened == sorted(shortened)  # ...but went out in it


@pytest.mark.parametrize("policy", POLICIES)
async def test_stats_match_what_the_engine_served(
    make_engine: EngineFactory, review_tables: tuple[Table, Table], policy: str
) -> None:
    plan = filter_join_map(review_tables)
    engine = make_engine()
    result = await plan.arun(engine, policy=policy)
    stats = by_op(result)
    filt, product, join, smap = (
        stats[k] for k in ("1:sem_filter", "2:cartesian_product", "3:sem_join", "4:sem_map")
    )

    # one logical call per input row of every LLM operator (continuations are extra
    # requests of the same call); none for the product. Decisions are one token.
    for llm_op in (filt, join, smap):
        assert llm_op.calls == llm_op.rows_in
        assert llm_op.requests == llm_op.calls + llm_op.continuations
    assert (filt.decisions, join.decisions, smap.decisions) == (filt.calls, join.calls, 0)
    assert filt.continuations == join.continuations == 0
    assert product.calls == product.requests == 0
    # predicates keep exactly the rows the engine answered "Yes" for
    assert filt.rows_in == 10
    assert filt.rows_out == engine.answers_of("1:sem_filter").count("Yes")
    assert product.rows_in == filt.rows_out
    assert product.rows_out == 8 * filt.rows_out == join.rows_in
    assert join.rows_out == engine.answers_of("3:sem_join").count("Yes")
    assert smap.rows_in == smap.rows_out == join.rows_out == len(result.frame)
    # the totals are the engine's
    assert result.requests == len(engine.requests) == len(engine.results)
    assert result.llm_calls == result.requests - result.continuations
    assert result.prompt_tokens == sum(r.prompt_tokens for r in engine.results)
    assert result.cached_tokens == sum(r.cached_tokens for r in engine.results)
    assert result.continued_tokens == smap.continued_tokens
    # every answer in the frame is made of the engine's output to that tuple's requests
    assert sorted(result.frame["quote"].map(len) > 0) == [True] * len(result.frame)


@pytest.mark.parametrize("policy", POLICIES)
async def test_the_longest_chain_is_the_most_tokens_one_tuple_generated(
    make_engine: EngineFactory, review_tables: tuple[Table, Table], policy: str
) -> None:
    """A tuple's chain is its filter's token, its join's and its map's (continuations
    included); the run's is the longest, under either policy alike."""
    engine = make_engine()
    result = await filter_join_map(review_tables).arun(engine, policy=policy)
    made: dict[tuple[str, tuple[int, ...]], int] = {}
    for r in engine.results:
        at = (_op_of(r.request_id), _key_of(r.request_id))
        made[at] = made.get(at, 0) + len(r.output_token_ids)
    chains = [
        made[("1:sem_filter", key[:1])] + tokens + made.get(("4:sem_map", key), 0)
        for (op, key), tokens in made.items()
        if op == "3:sem_join"
    ]
    chains += [t for (op, _), t in made.items() if op == "1:sem_filter"]  # rows it dropped
    assert result.longest_chain_tokens == max(chains) > 2


async def test_pipelined_gives_deeper_stages_priority(
    make_engine: EngineFactory, review_tables: tuple[Table, Table]
) -> None:
    plan = filter_join_map(review_tables)
    pipelined = make_engine()
    await plan.arun(pipelined, policy="pipelined")
    assert {r.priority for r in pipelined.requests_of("1:sem_filter")} == {1}
    assert {r.priority for r in pipelined.requests_of("3:sem_join")} == {0}
    assert {r.priority for r in pipelined.requests_of("4:sem_map")} == {0}

    blocking = make_engine()
    await plan.arun(blocking, policy="operator-at-a-time")
    assert {r.priority for r in blocking.requests} == {0}


@pytest.mark.parametrize("max_tasks", [1, 3])
async def test_pipelined_caps_tasks_in_flight(make_engine: EngineFactory, max_tasks: int) -> None:
    plan = kalypso.table(synthetic_notes(8, 20)).sem_map("Summarize the {text}.", "s")
    pipelined = make_engine()
    await plan.arun(pipelined, policy="pipelined", max_tasks_in_flight=max_tasks)
    assert pipelined.max_in_flight == max_tasks

    # operator-at-a-time submits every call of an operator at once, up to the same cap
    blocking = make_engine()
    await plan.arun(blocking, policy="operator-at-a-time", max_tasks_in_flight=max_tasks)
    assert blocking.max_in_flight == max_tasks
    uncapped = make_engine()
    await plan.arun(uncapped, policy="operator-at-a-time")
    assert uncapped.max_in_flight == 8


async def test_operator_at_a_time_keeps_as_many_calls_in_flight_as_the_engine_runs(
    make_engine: EngineFactory,
) -> None:
    """Paced by the engine: no more calls in flight than its ``max_num_seqs`` (the rest
    wait in the core's queue, in row order), unless the run sets its own cap; a policy
    not paced by the engine submits past it."""
    plan = kalypso.table(synthetic_notes(12, 20)).sem_map("Summarize the {text}.", "s")
    paced = make_engine(max_num_seqs=5)
    assert paced.capacity.max_running_requests == 5
    result = await plan.arun(paced, policy="operator-at-a-time")
    assert paced.max_in_flight == 5 and len(result.frame) == 12
    keys = [_key_of(r.request_id) for r in paced.requests]
    assert keys == sorted(keys)

    overridden = make_engine(max_num_seqs=5)
    await plan.arun(overridden, policy="operator-at-a-time", max_tasks_in_flight=7)
    assert overridden.max_in_flight == 7

    unpaced = make_engine(max_num_seqs=5, num_blocks=1024)
    await plan.arun(unpaced, policy="pipelined")
    assert unpaced.max_in_flight > 5


async def test_pipelined_keeps_prefixes_that_a_small_cache_loses_operator_at_a_time(
    make_engine: EngineFactory,
) -> None:
    """MEDEC's shape on 16 notes of ~150 tokens (about 2,700 tokens) with a KV cache of
    48 blocks of 16 tokens (768 tokens): operator-at-a-time evicts every note's prefix
    before the next operator comes back to it, so only the system prompt's full blocks are
    reused; pipelined (two tasks in flight) keeps every reuse an unbounded cache gets."""
    plan = (
        kalypso.table(synthetic_notes(16, 150), name="notes")
        .sem_filter("Does the {text} contain a medical error?")
        .sem_map("Which sentence of the {text} is wrong?", "sentence")
        .sem_map("Correct the wrong sentence of the {text}.", "corrected")
    )
    yes = SimOutputModel(yes_rate=1.0)
    small = {"num_blocks": 48, "block_size_tokens": 16, "outputs": yes}

    blocking = await plan.arun(make_engine(**small), policy="operator-at-a-time")
    pipelined = await plan.arun(make_engine(**small), policy="pipelined", max_tasks_in_flight=2)
    unbounded = await plan.arun(
        make_engine(num_blocks=4096, block_size_tokens=16, outputs=yes), policy="pipelined"
    )

    assert blocking.llm_calls == pipelined.llm_calls == 48
    assert blocking.continuations == 0  # operator-at-a-time runs every call at its cap
    assert blocking.prompt_tokens == pipelined.prompt_tokens == unbounded.prompt_tokens
    # the system message's full blocks, reused by every call but the first
    layout = ChatLayout(WordTokenizer())
    boundaries = layout.boundaries(("system", "user"))
    head = len(boundaries[0]) + len(layout.text_ids(DEFAULT_SYSTEM_PROMPT)) + len(boundaries[1])
    head_cached = head // 16 * 16
    assert blocking.cached_tokens == (blocking.requests - 1) * head_cached
    assert pipelined.cached_tokens == unbounded.cached_tokens
    assert pipelined.cached_tokens > blocking.cached_tokens
    pd.testing.assert_frame_equal(blocking.frame, pipelined.frame)


async def test_two_queries_can_share_an_engine(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(3, 10)).sem_filter("Is the {text} relevant?")
    engine = make_engine()
    first, second = await asyncio.gather(plan.arun(engine), plan.arun(engine))
    pd.testing.assert_frame_equal(first.frame, second.frame)


async def test_two_queries_with_distinct_ids_share_an_engine(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(3, 10)).sem_filter("Is the {text} relevant?")
    engine = make_engine()
    first, second = await asyncio.gather(
        plan.arun(engine, query_id="a"), plan.arun(engine, query_id="b")
    )
    pd.testing.assert_frame_equal(first.frame, second.frame)
    assert first.llm_calls == second.llm_calls == 3


# --------------------------------------------------------------------------- decisions


async def test_a_decision_is_one_constrained_token_with_its_margin(
    make_engine: EngineFactory,
) -> None:
    """A filter asks for exactly one token among the first tokens of "Yes" and "No",
    with their log-probabilities; the result keeps every decision with its margin."""
    plan = kalypso.table(synthetic_notes(4, 5)).sem_filter("Is the {text} ok?")
    engine = make_engine(outputs=SimOutputModel(yes_rate=0.5))
    result = await plan.arun(engine)
    tokenizer = engine.tokenizer
    choices = {tokenizer.encode("Yes")[0], tokenizer.encode("No")[0]}
    for request in engine.requests:
        assert request.max_tokens == 1
        assert set(request.allowed_token_ids or ()) == choices
        assert request.logprobs == 2
    assert [d.key for d in result.decisions] == [(0,), (1,), (2,), (3,)]
    assert {d.op_id for d in result.decisions} == {"1:sem_filter"}
    assert [d.choice for d in result.decisions] == engine.answers_of("1:sem_filter")
    assert all(d.margin > 0 for d in result.decisions)
    kept = [d.key[0] for d in result.decisions if d.choice == "Yes"]
    assert list(result.frame["note_id"]) == kept
    assert result.near_ties == ()


async def test_a_decision_never_leaves_its_choices(make_engine: EngineFactory) -> None:
    """Whatever the model would say, a filter's answer is "Yes" or "No" and a classifier's
    one of its labels: nothing is unparsable. (No prompt carries the simulator's yes/no
    marker here, so it answers each decision by drawing among the allowed tokens.)"""
    plan = (
        kalypso.table(synthetic_notes(8, 5))
        .sem_filter("Is the {text} clear?")
        .sem_classify("Classify the {text}.", ["positive", "negative", "mixed"], "sentiment")
    )
    engine = make_engine(outputs=SimOutputModel(yes_no_marker="a marker never in a prompt"))
    result = await plan.arun(engine)
    assert set(engine.answers_of("1:sem_filter")) <= {"Yes", "No"}
    assert by_op(result)["1:sem_filter"].rows_out == engine.answers_of("1:sem_filter").count("Yes")
    assert set(result.frame["sentiment"]) <= {"positive", "negative", "mixed"}
    assert by_op(result)["2:sem_classify"].decisions == len(result.frame)


async def test_near_tie_decisions_are_counted_and_reported(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(5, 5)).sem_filter("Is the {text} ok?")
    ties = SimOutputModel(near_tie_rate=1.0, near_tie_margin_nats=0.05)
    result = await plan.arun(make_engine(outputs=ties), near_tie_margin=0.1)
    assert len(result.near_ties) == 5
    assert by_op(result)["1:sem_filter"].near_ties == 5
    assert all(0 <= d.margin < 0.1 for d in result.near_ties)
    assert "5 near-tie decisions" in result.report()
    clear = await plan.arun(make_engine(outputs=SimOutputModel()), near_tie_margin=0.1)
    assert clear.near_ties == ()


async def test_labels_sharing_a_first_token_are_offered_as_letters(
    make_engine: EngineFactory,
) -> None:
    """ "Pass" and "Pass with conditions" start with the same token: one token cannot
    tell them apart, so the labels are offered as ``A) ...`` and the answer is a
    letter."""
    labels = ["Pass", "Pass with conditions", "Fail"]
    plan = kalypso.table(synthetic_notes(6, 5)).sem_classify("Grade the {text}.", labels, "grade")
    engine = make_engine()
    result = await plan.arun(engine)
    tokenizer = engine.tokenizer
    letters = {tokenizer.encode(x)[0] for x in "ABC"}
    for request in engine.requests:
        assert set(request.allowed_token_ids or ()) == letters
        assert "A) Pass; B) Pass with conditions; C) Fail" in tokenizer.decode(
            request.prompt_token_ids
        )
    assert set(result.frame["grade"]) <= set(labels)
    assert len(result.frame) == 6


async def test_filter_that_answers_no_everywhere_gives_an_empty_frame_with_the_plan_columns(
    make_engine: EngineFactory,
) -> None:
    plan = (
        kalypso.table(synthetic_notes(4, 5))
        .sem_filter("Is the {text} clear?")
        .sem_map("Sum {text}.", "s")
    )
    result = await plan.arun(make_engine(outputs=SimOutputModel(yes_rate=0.0)))
    assert by_op(result)["1:sem_filter"].rows_out == 0
    assert by_op(result)["2:sem_map"].calls == 0
    assert result.frame.empty
    assert list(result.frame.columns) == list(plan.columns)


async def test_negated_join_keeps_exactly_the_pairs_the_plain_join_drops(
    make_engine: EngineFactory, review_tables: tuple[Table, Table]
) -> None:
    left, aspects = review_tables
    instruction = "Does the {aspect} hold for the {text}?"
    plain = await left.sem_join(aspects, instruction).arun(make_engine())
    negated_plan = left.sem_join(aspects, instruction, negate=True)
    negated = await negated_plan.arun(make_engine())
    assert "sem_join NOT" in negated_plan.explain()

    def pairs(result: QueryResult) -> set[tuple[int, str]]:
        return set(zip(result.frame["review_id"], result.frame["aspect"], strict=True))

    assert pairs(plain).isdisjoint(pairs(negated))
    assert len(plain.frame) + len(negated.frame) == 10 * 8
    assert 0 < len(negated.frame) < 80


async def test_a_fixed_budget_below_one_token_is_refused(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(1, 5)).sem_map("Describe the {text}.", "d")
    engine = make_engine()
    with pytest.raises(kalypso.PlanError, match="fixed_bound_tokens"):
        await plan.arun(engine, fixed_bound_tokens=0)
    assert engine.requests == []


# --------------------------------------------------------------------------- extract, classify


def test_sem_extract_parse_rules() -> None:
    op = SemExtract("Read the {text}.", ["drug", "dose", "error_type"])
    text = (
        "Here is what I found:\n"
        "- Drug: amoxicillin\n"
        "**dose**: 500 mg: twice daily\n"
        "drug: ignored because drug is already set\n"
        "route: oral\n"
    )
    assert op.parse(text) == {
        "drug": "amoxicillin",
        "dose": "500 mg: twice daily",
        "error_type": None,
    }
    assert op.parse("error_type:\n") == {"drug": None, "dose": None, "error_type": ""}
    assert op.parse("no fields at all") == {"drug": None, "dose": None, "error_type": None}


async def test_extract_fields_without_a_line_are_missing_and_classify_always_answers(
    make_engine: EngineFactory,
) -> None:
    """The simulator's free-text answers hold no ``field:`` line: every field is None;
    the classifier's answer is one of its labels (a constrained decision)."""
    plan = (
        kalypso.table(synthetic_notes(3, 5))
        .sem_classify("Classify the {text}.", ["positive", "negative"], "sentiment")
        .sem_extract("Read the {text}.", ["drug", "dose"])
    )
    result = await plan.arun(make_engine())
    stats = by_op(result)

    assert stats["1:sem_classify"].decisions == 3
    assert set(result.frame["sentiment"]) <= {"positive", "negative"}
    assert result.frame[["drug", "dose"]].isna().all().all()
    assert len(result.frame) == 3  # neither operator drops rows


# --------------------------------------------------------------------------- blocking operators


SCORED_ITEMS = pd.DataFrame(
    {"item": [f"item {i} score={s}" for i, s in enumerate([3, 7, 1, 9, 7, 5])]}
)


@pytest.mark.parametrize(
    "policy",
    [
        "operator-at-a-time",
        pytest.param(
            "pipelined",
        ),
    ],
)
async def test_sem_topk_returns_k_rows_by_descending_score(
    make_engine: EngineFactory, policy: str
) -> None:
    plan = kalypso.table(SCORED_ITEMS).sem_topk("Is the {item} good?", k=3)
    result = await plan.arun(make_engine(outputs=ScoreInText()), policy=policy)

    # ties (the two 7s) in input order
    assert list(result.frame["item"]) == ["item 3 score=9", "item 1 score=7", "item 4 score=7"]
    assert list(result.frame["topk_score"]) == [9, 7, 7]
    stats = by_op(result)["1:sem_topk"]
    assert (stats.rows_in, stats.rows_out, stats.calls, stats.decisions) == (6, 3, 6, 6)


async def test_sem_topk_scores_are_one_digit_decisions(make_engine: EngineFactory) -> None:
    """Each score is one token among the digits 0-9, so it is always a score: the k
    best by score, ties in input order, whatever the model would have written."""
    plan = kalypso.table(SCORED_ITEMS).sem_topk("Is the {item} good?", k=4)
    engine = make_engine()
    result = await plan.arun(engine)
    digits = {engine.tokenizer.encode(str(d))[0] for d in range(10)}
    assert all(set(r.allowed_token_ids or ()) == digits for r in engine.requests)
    assert all(r.max_tokens == 1 for r in engine.requests)
    scores = [int(a) for a in engine.answers_of("1:sem_topk")]
    ranked = sorted(range(6), key=lambda i: (-scores[i], i))[:4]
    assert list(result.frame["item"]) == [SCORED_ITEMS["item"][i] for i in ranked]
    assert list(result.frame["topk_score"]) == [scores[i] for i in ranked]


@pytest.mark.parametrize("policy", POLICIES)
async def test_stage_after_a_barrier_runs_on_the_k_survivors(
    make_engine: EngineFactory, policy: str
) -> None:
    plan = (
        kalypso.table(SCORED_ITEMS)
        .sem_filter("Is the {item} in stock?")
        .sem_topk("Is the {item} good?", k=2)
        .sem_map("Describe the {item}.", "description")
    )
    engine = make_engine(outputs=ScoreInText(yes_rate=1.0))
    result = await plan.arun(engine, policy=policy)
    stats = by_op(result)

    assert stats["2:sem_topk"].rows_in == 6
    assert stats["3:sem_map"].rows_in == stats["3:sem_map"].calls == 2
    assert set(result.frame["topk_score"]) == {9, 7}
    assert list(result.frame.columns) == list(plan.columns)
    # the chain: the filter's token and the score's, then the longest description
    described = [
        len(r.output_token_ids) for r in engine.results if _op_of(r.request_id) == "3:sem_map"
    ]
    assert result.longest_chain_tokens == 1 + 1 + max(described)


async def test_sem_agg_returns_one_row(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(4, 10)).sem_agg("Summarize every {text}.", "report")
    engine = make_engine()
    result = await plan.arun(engine)

    assert list(result.frame.columns) == ["report"]
    assert len(result.frame) == 1
    assert by_op(result)["1:sem_agg"].calls == 1
    [answer] = engine.answers_of("1:sem_agg")
    assert result.frame["report"][0] == answer.strip()
    [request] = engine.requests
    prompt = engine.tokenizer.decode(request.prompt_token_ids)
    assert all(f"({i + 1}) [text]\nw{i}x0" in prompt for i in range(4))


async def test_sem_agg_folds_groups_that_do_not_fit_one_prompt(make_engine: EngineFactory) -> None:
    """Six notes of ~200 tokens with room for about three per prompt: two partial answers,
    then one call that folds them."""
    plan = kalypso.table(synthetic_notes(6, 200)).sem_agg("Summarize every {text}.", max_tokens=64)
    engine = make_engine(num_blocks=128, max_model_len_tokens=1024)
    result = await plan.arun(engine)

    assert len(result.frame) == 1
    assert by_op(result)["1:sem_agg"].calls == 3
    assert all(len(r.prompt_token_ids) + r.max_tokens <= 1024 for r in engine.requests)
    # a chain through the folds: the longer partial answer, then the final one
    partial, final = [len(r.output_token_ids) for r in engine.results[:2]], engine.results[2]
    assert result.longest_chain_tokens == max(partial) + len(final.output_token_ids)


async def test_sem_agg_of_nothing_is_one_empty_row(make_engine: EngineFactory) -> None:
    plan = (
        kalypso.table(synthetic_notes(3, 5))
        .sem_filter("Is the {text} relevant?")
        .sem_agg("Summarize every {text}.")
    )
    result = await plan.arun(make_engine(outputs=SimOutputModel(yes_rate=0.0)))
    assert result.frame.to_dict("records") == [{"aggregate": ""}]
    assert by_op(result)["2:sem_agg"].calls == 0


async def test_sem_agg_of_long_documents_fits_the_context(make_engine: EngineFactory) -> None:
    """Two documents that each nearly fill a window are never paired into one prompt
    (which was twice the context): each is summarized alone, then the partials folded."""
    plan = kalypso.table(synthetic_notes(2, 550)).sem_agg("Summarize every {text}.", max_tokens=64)
    engine = make_engine(num_blocks=128, max_model_len_tokens=1024)
    result = await plan.arun(engine)
    assert len(result.frame) == 1
    assert by_op(result)["1:sem_agg"].calls == 3
    assert all(len(r.prompt_token_ids) + r.max_tokens <= 1024 for r in engine.requests)


async def test_sem_agg_keeps_a_document_whole(make_engine: EngineFactory) -> None:
    """An item is never cut: a document that fits goes into the prompt entire (here one
    5,000-character "word" and a long text), one that cannot is refused before any call
    (tests/query/test_bad_input.py)."""
    frame = pd.DataFrame({"text": ["x" * 5000, " ".join(f"w{j}" for j in range(300))]})
    engine = make_engine(num_blocks=128, max_model_len_tokens=2048)
    result = await kalypso.table(frame).sem_agg("Summarize every {text}.").arun(engine)
    assert len(result.frame) == 1
    [request] = engine.requests
    prompt = engine.tokenizer.decode(request.prompt_token_ids)
    assert "x" * 5000 in prompt and " ".join(f"w{j}" for j in range(300)) in prompt


# --------------------------------------------------------------------------- plain Python operators


@pytest.mark.parametrize("policy", POLICIES)
async def test_plain_map_and_filter_make_no_calls(make_engine: EngineFactory, policy: str) -> None:
    frame = pd.DataFrame({"n": [1, 2, 3, 4, 5]})
    plan = (
        kalypso.table(frame).map(lambda r: r["n"] ** 2, "square").filter(lambda r: r["square"] > 5)
    )
    engine = make_engine()
    result = await plan.arun(engine, policy=policy)

    assert result.frame.to_dict("records") == [
        {"n": 3, "square": 9},
        {"n": 4, "square": 16},
        {"n": 5, "square": 25},
    ]
    stats = by_op(result)
    assert (stats["1:map"].rows_in, stats["1:map"].rows_out) == (5, 5)
    assert (stats["2:filter"].rows_in, stats["2:filter"].rows_out) == (5, 3)
    assert engine.requests == [] and result.llm_calls == 0


async def test_python_filter_before_llm_operator_saves_calls(make_engine: EngineFactory) -> None:
    plan = (
        kalypso.table(synthetic_notes(6, 5))
        .filter(lambda r: r["note_id"] % 2 == 0)
        .sem_map("Sum {text}.", "s")
    )
    engine = make_engine()
    result = await plan.arun(engine)
    assert list(result.frame["note_id"]) == [0, 2, 4]
    assert by_op(result)["2:sem_map"].calls == len(engine.requests) == 3


# --------------------------------------------------------------------------- output columns


@pytest.mark.parametrize(
    "build",
    [
        lambda t: t.sem_filter("Is {text} ok?"),
        lambda t: t.sem_map("Sum {text}.", "s").sem_extract("Read {s}.", ["a", "b"]),
        lambda t: t.sem_classify("Classify {text}.", ["x", "y"]).map(lambda r: 1, "one"),
        lambda t: t.sem_join(pd.DataFrame({"text": ["r"], "h": ["x"]}), "Is {h} in {text}?"),
        lambda t: t.sem_topk("Rank {text}.", k=2).sem_map("Sum {text}.", "s"),
        lambda t: t.sem_map("Sum {text}.", "s").sem_agg("Summarize every {s}."),
    ],
    ids=["filter", "map-extract", "classify-map", "join-renamed", "topk-map", "agg"],
)
@pytest.mark.parametrize("policy", POLICIES)
async def test_result_columns_are_plan_columns(
    make_engine: EngineFactory, build: Callable[[Table], Table], policy: str
) -> None:
    plan = build(kalypso.table(synthetic_notes(3, 5)))
    result = await plan.arun(make_engine(outputs=SimOutputModel(yes_rate=1.0)), policy=policy)
    assert tuple(result.frame.columns) == plan.columns
    assert len(result.frame) > 0


# --------------------------------------------------------------------------- index-based operators


CLAIMS = pd.DataFrame(
    {
        "claim": [
            "Hamlet was written by William Shakespeare.",
            "The Eiffel Tower stands in Paris.",
            "Photosynthesis turns sunlight into sugar in plants.",
        ]
    }
)
PASSAGES = [
    "The Pacific is the largest and deepest ocean on Earth.",
    "William Shakespeare wrote the tragedy Hamlet around 1600.",
    "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
    "The Eiffel Tower in Paris was completed in 1889.",
]
ARTICLES = pd.DataFrame(
    {
        "article": [
            "After amoxicillin the patient developed an itchy skin rash and hives.",
            "On high-dose statins the patient reported severe muscle pain and weakness.",
        ]
    }
)
REACTIONS = pd.DataFrame(
    {"reaction": ["skin rash", "myalgia, muscle pain", "nausea", "headache", "liver injury"]}
)


async def test_retrieval_and_indexed_join_on_the_embedding_model(
    make_engine: EngineFactory,
) -> None:
    """The one test that loads all-MiniLM-L6-v2: FEVER-style retrieval feeding a
    predicate, and a BioDEX-style indexed join whose cascade skips LLM calls."""
    from kalypso.query.shared_index import shared_index_cache

    builds_before = shared_index_cache().builds

    # FEVER: index_search puts the nearest passage into the predicate's prompt
    fever = (
        kalypso.table(CLAIMS, name="claims")
        .index_search(PASSAGES, "{claim}", k=1)
        .sem_filter("Is the {claim} supported by the {evidence}?")
    )
    fever_engine = make_engine(outputs=SimOutputModel(yes_rate=1.0))
    fever_result = await fever.arun(fever_engine)
    assert list(fever_result.frame["evidence"]) == [PASSAGES[1], PASSAGES[3], PASSAGES[2]]
    by_key = sorted(fever_engine.requests_of("2:sem_filter"), key=lambda r: r.request_id)
    for request, passage in zip(by_key, [PASSAGES[1], PASSAGES[3], PASSAGES[2]], strict=True):
        assert f"[evidence]\n{passage}\n\n" in fever_engine.tokenizer.decode(
            request.prompt_token_ids
        )
    assert by_op(fever_result)["1:index_search"].calls == 0

    # BioDEX: every candidate is asked without a cascade ...
    def biodex(index: IndexJoin) -> Table:
        return kalypso.table(ARTICLES, name="articles").sem_join(
            kalypso.table(REACTIONS, name="reactions"),
            "Does the {article} describe the adverse drug reaction {reaction}?",
            index=index,
        )

    uncascaded = await biodex(IndexJoin("{article}", "reaction", k=3)).arun(
        make_engine(outputs=SimOutputModel(yes_rate=1.0))
    )
    pairs = uncascaded.frame
    assert len(pairs) == 6  # k=3 candidates for each of 2 articles, all answered yes
    assert list(pairs["article"]) == [ARTICLES["article"][0]] * 3 + [ARTICLES["article"][1]] * 3
    nearest = pairs.loc[pairs.groupby("article", sort=False)["join_distance"].idxmin()]
    assert list(nearest["reaction"]) == ["skin rash", "myalgia, muscle pain"]
    assert pairs["join_distance"].between(0.0, 2.0).all()
    distances = sorted(pairs["join_distance"])
    low, high = distances[0], distances[-1]
    assert low < high

    # ... and the cascade accepts the closest pair and rejects the farthest without a call
    cascade = biodex(
        IndexJoin("{article}", "reaction", k=3, accept_below=low + 1e-6, reject_above=high - 1e-6)
    )
    engine = make_engine(outputs=SimOutputModel(yes_rate=1.0))
    result = await cascade.arun(engine)
    join = by_op(result)["2:sem_join"]
    accept_below, reject_above = low + 1e-6, high - 1e-6
    accepted = [d for d in distances if d < accept_below]
    asked = [d for d in distances if accept_below <= d <= reject_above]
    assert accepted and len(accepted) + len(asked) < len(distances)  # every branch is taken
    assert join.rows_in == 6
    assert join.calls == len(engine.requests) == len(asked)
    assert join.rows_out == len(accepted) + len(asked)  # accepted without a call, asked: yes
    assert high not in set(result.frame["join_distance"])

    # one index per distinct corpus, reused by later plans over the same table
    assert shared_index_cache().builds - builds_before == 2


async def test_host_work_is_announced_to_the_engine(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index lookups of an indexed join run in a thread, inside the engine's
    ``host_work`` (the simulator holds its clock meanwhile: ``tests/sim``), so a slower
    host gives the same virtual time and the same steps."""
    plan = (
        kalypso.table(ARTICLES, name="articles")
        .sem_map("List the reactions the {article} reports.", "reactions", max_tokens=24)
        .sem_join(
            kalypso.table(REACTIONS, name="reactions"),
            "Does the {article} describe the adverse drug reaction {reaction}?",
            index=IndexJoin("{reactions}", "reaction", k=3),
        )
    )
    fast = make_engine(profile="smollm2-cpu-f32")
    expected = await plan.arun(fast)
    select_many = VectorIndex.select_many
    held: list[int] = []

    def slow_select(self: VectorIndex, *args: Any, **kwargs: Any) -> Any:
        held.append(slow.host_work_held)
        time.sleep(0.1)  # a host a lot slower than the engine's steps
        return select_many(self, *args, **kwargs)

    monkeypatch.setattr(VectorIndex, "select_many", slow_select)
    slow = make_engine(profile="smollm2-cpu-f32")
    result = await plan.arun(slow)
    pd.testing.assert_frame_equal(result.frame, expected.frame)
    assert held and min(held) >= 1  # every lookup ran inside host_work
    assert (slow.now_s, slow.num_steps) == (fast.now_s, fast.num_steps)
    assert by_op(result)["3:sem_join"].calls == 6
