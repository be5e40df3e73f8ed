"""Running plans on the simulated engine: both policies, statistics, prefix reuse, parse
rules and defaults, retries, blocking operators and plain Python operators.

The simulator is deterministic (answers are a hash of the prompt; a prompt whose tail
contains "yes or no" is answered "Yes" or "No"), so tests assert exact values. Every
engine is a :class:`RecordingSim`, which keeps the requests and results it served; the
statistics of a run are checked against what the engine actually saw.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pytest

import kalypso
from kalypso.datasets import reviews
from kalypso.engine.protocol import GenerateRequest, GenerateResult, Tokenizer
from kalypso.engine.sim import SimEngine, SimOutputModel, WordTokenizer
from kalypso.engine.sim.outputs import SimCompletion
from kalypso.prompts import PromptLayout
from kalypso.query import IndexJoin, QueryResult, SemClassify, SemExtract, Table
from kalypso.query.llm_ops import default_verdict, parse_yes_no
from kalypso.query.stats import OperatorStats

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
    """Answers a sem_topk scoring prompt with the digit after ``score=`` in the prompt;
    every other prompt as the default output model."""

    def complete(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        tokenizer: Tokenizer,
        ignore_eos: bool = False,
        stop: Sequence[str] = (),
    ) -> SimCompletion:
        prompt = tokenizer.decode(prompt_token_ids)
        if "Answer with one digit." in prompt:
            match = re.search(r"score=(\d)", prompt)
            assert match is not None
            eos = tokenizer.eos_token_id
            assert eos is not None
            return SimCompletion((*tokenizer.encode(match.group(1)), eos), match.group(1), "stop")
        return super().complete(
            prompt_token_ids,
            max_tokens=max_tokens,
            tokenizer=tokenizer,
            ignore_eos=ignore_eos,
            stop=stop,
        )


@dataclass(frozen=True)
class HedgedAnswers(SimOutputModel):
    """Answers yes/no prompts about rows whose text contains ``unsure`` with "Maybe." and
    about rows whose text contains ``doubtful`` with "The text does not say."; every other
    prompt as the default output model."""

    def complete(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        tokenizer: Tokenizer,
        ignore_eos: bool = False,
        stop: Sequence[str] = (),
    ) -> SimCompletion:
        prompt = tokenizer.decode(prompt_token_ids)
        for marker, answer in (("unsure", "Maybe."), ("doubtful", "The text does not say.")):
            if marker in prompt and "yes or no" in prompt:
                eos = tokenizer.eos_token_id
                assert eos is not None
                return SimCompletion((*tokenizer.encode(answer), eos), answer, "stop")
        return super().complete(
            prompt_token_ids,
            max_tokens=max_tokens,
            tokenizer=tokenizer,
            ignore_eos=ignore_eos,
            stop=stop,
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

    # one call per input row of every LLM operator, plus one per retry; none for the
    # product. Predicates have a static bound and never retry.
    for llm_op in (filt, join, smap):
        assert llm_op.calls == llm_op.rows_in + llm_op.retries
        assert llm_op.unparsed == 0
    assert filt.retries == 0 and join.retries == 0
    assert product.calls == 0
    # predicates keep exactly the rows the engine answered "Yes" for
    assert filt.rows_in == 10
    assert filt.rows_out == engine.answers_of("1:sem_filter").count("Yes")
    assert product.rows_in == filt.rows_out
    assert product.rows_out == 8 * filt.rows_out == join.rows_in
    assert join.rows_out == engine.answers_of("3:sem_join").count("Yes")
    assert smap.rows_in == smap.rows_out == join.rows_out == len(result.frame)
    # the totals are the engine's
    assert result.llm_calls == len(engine.requests) == len(engine.results)
    assert result.prompt_tokens == sum(r.prompt_tokens for r in engine.results)
    assert result.cached_tokens == sum(r.cached_tokens for r in engine.results)
    # the answers in the frame are the engine's answers to the sem_map calls (the
    # answers of calls that were re-issued with a larger bound are not kept)
    served = [a.strip() for a in engine.answers_of("4:sem_map")]
    assert all(answer in served for answer in result.frame["quote"])
    assert len(served) == len(result.frame) + smap.retries


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

    blocking = make_engine()
    await plan.arun(blocking, policy="operator-at-a-time", max_tasks_in_flight=max_tasks)
    assert blocking.max_in_flight == 8  # every call of the operator is submitted at once


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
    assert blocking.prompt_tokens == pipelined.prompt_tokens == unbounded.prompt_tokens
    # the system prompt's full blocks, reused by every call but the first
    head_cached = PromptLayout(WordTokenizer()).head_tokens // 16 * 16
    assert blocking.cached_tokens == (blocking.llm_calls - 1) * head_cached
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


# --------------------------------------------------------------------------- predicates


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        ("Yes", True),
        ("yes.", True),
        ("**Yes**, it does", True),
        ("TRUE", True),
        ("No", False),
        (" no, not at all", False),
        ("False.", False),
        ("Maybe", None),
        ("", None),
        ("1", None),
        ("Yesterday it did", None),
        ("I think yes", None),
    ],
)
def test_parse_yes_no(answer: str, verdict: bool | None) -> None:
    assert parse_yes_no(answer) is verdict


@pytest.mark.parametrize("policy", POLICIES)
async def test_unparsable_predicate_answers_are_counted_and_get_the_default(
    make_engine: EngineFactory, policy: str
) -> None:
    """The documented default (llm_ops): an unparsed answer drops the row if it contains
    a negation, else keeps it."""
    frame = pd.DataFrame(
        {"text": ["clear case", "unsure case", "doubtful case", "unsure again", "doubtful end"]}
    )
    plan = kalypso.table(frame).sem_filter("Is the {text} clear?").sem_map("Sum {text}.", "s")
    engine = make_engine(outputs=HedgedAnswers(yes_rate=1.0))
    result = await plan.arun(engine, policy=policy)
    stats = by_op(result)

    answers = engine.answers_of("1:sem_filter")
    assert sorted(answers) == [
        "Maybe.",
        "Maybe.",
        "The text does not say.",
        "The text does not say.",
        "Yes",
    ]
    assert stats["1:sem_filter"].unparsed == 4
    assert stats["1:sem_filter"].rows_out == 3
    assert list(result.frame["text"]) == ["clear case", "unsure case", "unsure again"]
    assert stats["2:sem_map"].unparsed == 0


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        ("Maybe", True),
        ("It depends on the reading", True),
        ("The text does not say", False),
        ("It doesn't", False),
        ("Never mentioned", False),
        ("I cannot tell", False),
        ("None of it", False),
        ("", True),
    ],
)
def test_default_verdict_of_unparsed_answers(answer: str, kept: bool) -> None:
    assert parse_yes_no(answer) is None
    assert default_verdict(answer) is kept


async def test_free_text_answers_without_negation_are_all_kept(make_engine: EngineFactory) -> None:
    plan = (
        kalypso.table(synthetic_notes(4, 5))
        .sem_filter("Is the {text} clear?")
        .sem_map("Sum {text}.", "s")
    )
    # no prompt carries this marker, so the yes/no questions get free text (no negations)
    engine = make_engine(outputs=SimOutputModel(yes_no_marker="a marker never in a prompt"))
    result = await plan.arun(engine)

    assert by_op(result)["1:sem_filter"].unparsed == 4
    assert by_op(result)["1:sem_filter"].rows_out == 4
    assert by_op(result)["2:sem_map"].calls == 4
    assert list(result.frame.columns) == list(plan.columns)


async def test_filter_that_answers_no_everywhere_gives_an_empty_frame_with_the_plan_columns(
    make_engine: EngineFactory,
) -> None:
    plan = (
        kalypso.table(synthetic_notes(4, 5))
        .sem_filter("Is the {text} clear?")
        .sem_map("Sum {text}.", "s")
    )
    result = await plan.arun(make_engine(outputs=SimOutputModel(yes_rate=0.0)))
    assert by_op(result)["1:sem_filter"].unparsed == 0
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


async def test_filter_answers_are_not_retried(make_engine: EngineFactory) -> None:
    """A predicate's bound is static: an answer cut at max_tokens is parsed as is."""
    plan = kalypso.table(synthetic_notes(3, 5)).sem_filter("Is the {text} ok?", max_tokens=1)
    engine = make_engine(outputs=SimOutputModel(yes_rate=1.0))
    result = await plan.arun(engine)
    assert [r.finish_reason for r in engine.results] == ["length"] * 3  # "Yes" + end of sequence
    assert by_op(result)["1:sem_filter"].retries == 0
    assert len(result.frame) == 3


# --------------------------------------------------------------------------- retries


LONG_ANSWERS = SimOutputModel(min_output_tokens=40, max_output_tokens=40)
"""Free-text answers of exactly 40 words (40 tokens, then end of sequence)."""


@pytest.mark.parametrize(
    "policy", [p for p in POLICIES if p not in ("static:R", "operator-at-a-time")]
)
async def test_sem_map_retries_answers_cut_at_the_first_bound(
    make_engine: EngineFactory, policy: str
) -> None:
    plan = kalypso.table(synthetic_notes(3, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, policy=policy)
    stats = by_op(result)["1:sem_map"]

    # 16 -> "length", 32 -> "length", 64 -> "stop"
    assert (stats.rows_in, stats.rows_out, stats.calls, stats.retries) == (3, 3, 9, 6)
    assert stats.unparsed == 0
    assert result.retries == 6
    for key in range(3):
        attempts = [r for r in engine.requests if r.request_id.split(":")[3] == str(key)]
        assert [r.max_tokens for r in attempts] == [16, 32, 64]
    assert [len(text.split()) for text in result.frame["d"]] == [40, 40, 40]


async def test_operator_at_a_time_calls_run_at_the_cap(make_engine: EngineFactory) -> None:
    """Without a scheduler there is no memory to reserve: one call per row, at the cap."""
    plan = kalypso.table(synthetic_notes(3, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, policy="operator-at-a-time")
    assert [r.max_tokens for r in engine.requests] == [64, 64, 64]
    assert result.retries == 0
    assert [len(text.split()) for text in result.frame["d"]] == [40, 40, 40]


async def test_sem_map_goes_to_the_cap_after_max_retries(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(2, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, max_retries=1)
    stats = by_op(result)["1:sem_map"]

    # the last allowed retry runs at the cap, so the answer never depends on the bounds
    assert (stats.calls, stats.retries, stats.unparsed) == (4, 2, 0)
    assert sorted(r.max_tokens for r in engine.requests_of("1:sem_map")) == [16, 16, 64, 64]
    assert [len(text.split()) for text in result.frame["d"]] == [40, 40]  # complete at the cap


async def test_retry_bounds_stop_at_the_hard_cap(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(1, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=24, first_bound_tokens=10
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, max_retries=5)

    assert [r.max_tokens for r in engine.requests] == [10, 20, 24]
    assert [r.finish_reason for r in engine.results] == ["length"] * 3
    assert by_op(result)["1:sem_map"].retries == 2
    assert len(result.frame["d"][0].split()) == 24  # cut at the cap: what the user asked for


@pytest.mark.parametrize(("fixed_tokens", "bounds"), [(8, [8, 16, 64]), (32, [32, 64]), (48, [48])])
async def test_a_fixed_budget_replaces_the_estimator_and_answers_do_not_change(
    make_engine: EngineFactory, fixed_tokens: int, bounds: list[int]
) -> None:
    plan = kalypso.table(synthetic_notes(2, 5)).sem_map(
        "Describe the {text}.", "d", max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine, fixed_bound_tokens=fixed_tokens)
    for key in range(2):
        attempts = [r for r in engine.requests if r.request_id.split(":")[3] == str(key)]
        assert [r.max_tokens for r in attempts] == bounds
    assert result.retries == 2 * (len(bounds) - 1)
    assert [len(text.split()) for text in result.frame["d"]] == [40, 40]


async def test_a_fixed_budget_below_one_token_is_refused(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(1, 5)).sem_map("Describe the {text}.", "d")
    engine = make_engine()
    with pytest.raises(kalypso.PlanError, match="fixed_bound_tokens"):
        await plan.arun(engine, fixed_bound_tokens=0)
    assert engine.requests == []


async def test_no_retry_when_the_first_bound_is_the_cap(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(2, 5)).sem_map("Describe the {text}.", "d", max_tokens=16)
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine)

    assert [r.max_tokens for r in engine.requests] == [16, 16]
    assert (by_op(result)["1:sem_map"].calls, result.retries) == (2, 0)


async def test_sem_extract_retries_like_sem_map(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(1, 5)).sem_extract(
        "Read the {text}.", ["drug"], max_tokens=64, first_bound_tokens=16
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await plan.arun(engine)
    assert [r.max_tokens for r in engine.requests] == [16, 32, 64]
    assert by_op(result)["1:sem_extract"].retries == 2


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


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("positive", "positive"),
        ("  Negative. The reviewer hated it", "negative"),
        ("MIXED", "mixed"),
        ("The sentiment is negative overall, though partly positive", "negative"),
        ("I would say it is positive", "positive"),
        ("unclear", None),
        ("", None),
    ],
)
def test_sem_classify_parse_rules(answer: str, label: str | None) -> None:
    op = SemClassify("Classify the {text}.", ["positive", "negative", "mixed"])
    assert op.parse(answer) == label


def test_sem_classify_prefers_the_longest_label_the_answer_starts_with() -> None:
    op = SemClassify("Classify {text}.", ["Pass", "Pass with conditions", "Fail"])
    assert op.parse("pass with conditions: fix the typo") == "Pass with conditions"
    assert op.parse("Pass.") == "Pass"


def test_sem_classify_prefers_the_longest_label_at_the_same_position() -> None:
    op = SemClassify("Classify {text}.", ["Pass", "Pass with conditions", "Fail"])
    assert op.parse("I would rate it pass with conditions") == "Pass with conditions"


async def test_sem_classify_and_extract_count_unparsed_answers(make_engine: EngineFactory) -> None:
    """The simulator's free-text answers contain no label and no ``field:`` line."""
    plan = (
        kalypso.table(synthetic_notes(3, 5))
        .sem_classify("Classify the {text}.", ["positive", "negative"], "sentiment")
        .sem_extract("Read the {text}.", ["drug", "dose"])
    )
    result = await plan.arun(make_engine())
    stats = by_op(result)

    assert stats["1:sem_classify"].unparsed == 3
    assert stats["2:sem_extract"].unparsed == 3
    assert result.frame[["sentiment", "drug", "dose"]].isna().all().all()
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
    assert (stats.rows_in, stats.rows_out, stats.calls, stats.unparsed) == (6, 3, 6, 0)


async def test_sem_topk_with_unparsable_scores_keeps_input_order(
    make_engine: EngineFactory,
) -> None:
    plan = kalypso.table(SCORED_ITEMS).sem_topk("Is the {item} good?", k=2)
    result = await plan.arun(make_engine())  # free-text answers hold no digit

    assert list(result.frame["item"]) == list(SCORED_ITEMS["item"][:2])
    assert list(result.frame["topk_score"]) == [-1, -1]
    assert by_op(result)["1:sem_topk"].unparsed == 6


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


async def test_sem_agg_of_nothing_is_one_empty_row(make_engine: EngineFactory) -> None:
    plan = (
        kalypso.table(synthetic_notes(3, 5))
        .sem_filter("Is the {text} relevant?")
        .sem_agg("Summarize every {text}.")
    )
    result = await plan.arun(make_engine(outputs=SimOutputModel(yes_rate=0.0)))
    assert result.frame.to_dict("records") == [{"aggregate": ""}]
    assert by_op(result)["2:sem_agg"].calls == 0


@pytest.mark.xfail(
    strict=True,
    reason="SemAgg._pack pairs items up when each fills a window on its own, ignoring the "
    "budget: two items near the budget make a prompt of twice the budget and the call "
    "fails with PromptTooLongError",
)
async def test_sem_agg_of_long_documents_fits_the_context(make_engine: EngineFactory) -> None:
    plan = kalypso.table(synthetic_notes(2, 800)).sem_agg("Summarize every {text}.", max_tokens=64)
    engine = make_engine(num_blocks=128, max_model_len_tokens=1024)
    result = await plan.arun(engine)
    assert len(result.frame) == 1


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
    for request, passage in zip(
        fever_engine.requests_of("2:sem_filter"),
        [PASSAGES[1], PASSAGES[3], PASSAGES[2]],
        strict=True,
    ):
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
