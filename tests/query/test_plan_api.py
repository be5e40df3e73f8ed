"""The lazy plan API: immutability, output columns, the operator registry, custom
operators (their call shape is checked when the plan is built, and an LLM operator is
sized like the built-in ones), list-of-dicts input and the result object, on the
simulated engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import pandas as pd
import pytest

import kalypso
from kalypso.core.instance import CallOutcome
from kalypso.engine.sim import SimEngine, SimOutputModel
from kalypso.query import (
    BlockingOperator,
    IndexJoin,
    LLMOperator,
    Operator,
    OperatorContract,
    PipelinedOperator,
    PlanError,
    RowOperator,
    SemFilter,
    Table,
    register_operator,
    registered_operators,
)
from kalypso.query.operators import Schema, Values
from kalypso.query.templates import Instruction

EngineFactory = Callable[..., SimEngine]


@pytest.fixture
async def make_engine() -> AsyncIterator[EngineFactory]:
    engines: list[SimEngine] = []

    def make(**kwargs: Any) -> SimEngine:
        kwargs.setdefault("num_blocks", 256)
        kwargs.setdefault("block_size_tokens", 16)
        engine = SimEngine(**kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()


def docs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "doc_id": [0, 1, 2, 3],
            "text": [
                "the battery lasts two days",
                "the screen cracked in a week",
                "support never answered",
                "the battery died after an hour",
            ],
        }
    )


# --------------------------------------------------------------------------- immutability


def test_every_method_returns_a_new_table_and_leaves_the_original_alone() -> None:
    base = kalypso.table(docs(), name="docs")
    filtered = base.sem_filter("Does the {text} mention the battery?")
    mapped = filtered.sem_map("Summarize the {text}.", "summary")
    again = filtered.map(lambda r: len(r["text"]), "length")

    assert isinstance(filtered, Table) and filtered is not base
    assert base.operators == ()
    assert base.columns == ("doc_id", "text")
    assert len(filtered.operators) == 1
    assert filtered.columns == ("doc_id", "text")
    # both children extend the same parent without changing it or each other
    assert mapped.operators[0] is filtered.operators[0]
    assert again.operators[0] is filtered.operators[0]
    assert [op.kind for op in mapped.operators] == ["sem_filter", "sem_map"]
    assert [op.kind for op in again.operators] == ["sem_filter", "map"]
    assert mapped.columns == ("doc_id", "text", "summary")
    assert again.columns == ("doc_id", "text", "length")
    assert (base.name, filtered.name, mapped.name) == ("docs", "docs", "docs")


def test_changing_the_input_frame_after_building_does_not_change_the_plan() -> None:
    frame = docs()
    plan = kalypso.table(frame).sem_filter("Is {text} positive?")
    frame.loc[0, "text"] = "changed"
    frame["extra"] = 1

    assert plan.source.loc[0, "text"] == "the battery lasts two days"
    assert plan.columns == ("doc_id", "text")


def test_source_index_is_reset() -> None:
    frame = docs().set_index(pd.Index([10, 20, 30, 40]))
    assert list(kalypso.table(frame).source.index) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- columns


@pytest.mark.parametrize(
    ("build", "columns"),
    [
        (lambda t: t.sem_filter("Is {text} ok?"), ("doc_id", "text")),
        (lambda t: t.sem_map("Summarize {text}.", "s"), ("doc_id", "text", "s")),
        (lambda t: t.sem_extract("Read {text}.", ["a", "b"]), ("doc_id", "text", "a", "b")),
        (lambda t: t.sem_classify("Classify {text}.", ["x", "y"]), ("doc_id", "text", "label")),
        (
            lambda t: t.sem_classify("Classify {text}.", ["x", "y"], "kind"),
            ("doc_id", "text", "kind"),
        ),
        (lambda t: t.index_search(["p"], "{text}", k=1), ("doc_id", "text", "evidence")),
        (lambda t: t.sem_topk("Rank {text}.", k=2), ("doc_id", "text", "topk_score")),
        (lambda t: t.sem_agg("Summarize {text}."), ("aggregate",)),
        (lambda t: t.sem_agg("Summarize {text}.", "report"), ("report",)),
        (lambda t: t.map(lambda r: 1, "one"), ("doc_id", "text", "one")),
        (lambda t: t.filter(lambda r: True), ("doc_id", "text")),
        (
            lambda t: t.sem_join(pd.DataFrame({"h": ["x"], "text": ["y"]}), "Does {text} say {h}?"),
            ("doc_id", "text", "h", "text_right"),
        ),
        (
            lambda t: t.sem_join(
                pd.DataFrame({"h": ["x"]}),
                "Does {text} say {h}?",
                index=IndexJoin("{text}", "h", k=1),
            ),
            ("doc_id", "text", "h", "join_distance"),
        ),
    ],
    ids=[
        "filter",
        "map",
        "extract",
        "classify",
        "classify-named",
        "index_search",
        "topk",
        "agg",
        "agg-named",
        "py-map",
        "py-filter",
        "join",
        "indexed-join",
    ],
)
def test_columns_are_the_planned_output(build: Callable[[Table], Table], columns: Schema) -> None:
    assert build(kalypso.table(docs())).columns == columns


def test_join_rename_never_produces_duplicate_columns() -> None:
    left = pd.DataFrame({"text": ["a"], "text_right": ["left value"]})
    right = pd.DataFrame({"text": ["right value"]})
    try:
        plan = kalypso.table(left).sem_join(right, "Do {text} and {text_right} match?")
    except PlanError:
        return  # refusing the clash is an acceptable fix
    assert len(set(plan.columns)) == len(plan.columns), plan.columns


# --------------------------------------------------------------------------- the registry


def test_builtin_operators_are_registered() -> None:
    names = set(registered_operators())
    assert {
        "sem_filter",
        "sem_map",
        "sem_extract",
        "sem_classify",
        "sem_topk",
        "sem_agg",
        "index_search",
        "map",
        "filter",
    } <= names


def test_op_by_name_builds_the_same_plan_as_the_method() -> None:
    base = kalypso.table(docs(), name="docs")
    by_name = base.op("sem_filter", "Does the {text} mention the battery?").op(
        "sem_map", "Summarize the {text}.", "summary", max_tokens=32
    )
    by_method = base.sem_filter("Does the {text} mention the battery?").sem_map(
        "Summarize the {text}.", "summary", max_tokens=32
    )

    assert isinstance(by_name.operators[0], SemFilter)
    assert by_name.explain() == by_method.explain()
    assert by_name.columns == by_method.columns
    assert by_name.operators[1].max_output_tokens() == 32


def test_register_operator_rejects_bad_and_duplicate_names() -> None:
    with pytest.raises(ValueError, match="identifier"):
        register_operator("not an identifier", SemFilter)
    with pytest.raises(ValueError, match="already registered"):
        register_operator("sem_filter", SemFilter)


class Uppercase(RowOperator):
    """A tool call without an LLM: appends ``<column>_upper``."""

    kind = "uppercase"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def __init__(self, column: str) -> None:
        self.column = column

    @property
    def output_column(self) -> str:
        return f"{self.column}_upper"

    def output_schema(self, schema: Schema) -> Schema:
        if self.column not in schema:
            raise PlanError(f"uppercase: no column {self.column!r}")
        return (*schema, self.output_column)

    def describe(self) -> str:
        return f"uppercase {self.column} -> {self.output_column}"

    def apply_row(self, values: Values) -> Values | None:
        return {self.output_column: str(values[self.column]).upper()}


async def test_registered_custom_operator_runs_in_a_plan(make_engine: EngineFactory) -> None:
    register_operator("uppercase", Uppercase, replace=True)
    assert "uppercase" in registered_operators()
    plan = (
        kalypso.table(docs(), name="docs")
        .sem_filter("Does the {text} mention the battery?")
        .op("uppercase", "text")
    )
    assert plan.columns == ("doc_id", "text", "text_upper")
    assert "[2:uppercase] uppercase text -> text_upper  (pipelining)" in plan.explain()
    with pytest.raises(PlanError, match="no column 'missing'"):
        plan.op("uppercase", "missing")

    engine = make_engine(outputs=SimOutputModel(yes_rate=0.5))
    result = await plan.arun(engine)

    stats = {s.operator: s for s in result.operator_stats}
    kept = stats["1:sem_filter"].rows_out
    assert 0 < kept < len(docs())  # the filter is selective on this data
    assert (stats["2:uppercase"].rows_in, stats["2:uppercase"].rows_out) == (kept, kept)
    assert stats["2:uppercase"].calls == 0
    assert list(result.frame.columns) == list(plan.columns)
    assert list(result.frame["text_upper"]) == [t.upper() for t in result.frame["text"]]


async def test_custom_operator_via_apply(make_engine: EngineFactory) -> None:
    plan = kalypso.table(docs()).apply(Uppercase("text"))
    result = await plan.arun(make_engine())
    assert list(result.frame["text_upper"]) == [t.upper() for t in docs()["text"]]
    assert result.llm_calls == 0


# --------------------------------------------------------------------------- inputs and results


async def test_list_of_dicts_input(make_engine: EngineFactory) -> None:
    records = [{"name": "ada", "bio": "wrote programs"}, {"name": "alan", "bio": "broke codes"}]
    plan = kalypso.table(records, name="people").sem_map("Describe {name}: {bio}.", "about")

    assert plan.columns == ("name", "bio", "about")
    assert plan.source.to_dict("records") == records
    result = await plan.arun(make_engine())
    assert list(result.frame["name"]) == ["ada", "alan"]
    assert result.frame["about"].map(lambda s: isinstance(s, str) and s != "").all()


async def test_query_result_totals_are_the_sums_of_operator_stats(
    make_engine: EngineFactory,
) -> None:
    plan = (
        kalypso.table(docs())
        .sem_filter("Does the {text} mention the battery?")
        .sem_map("Summarize the {text}.", "summary")
    )
    engine = make_engine()
    result = await plan.arun(engine, policy="operator-at-a-time")

    assert result.policy == "operator-at-a-time"
    assert result.engine == engine.name
    assert list(result.stats["operator"]) == ["1:sem_filter", "2:sem_map"]
    assert result.llm_calls == int(result.stats["calls"].sum()) > 0
    assert result.prompt_tokens == int(result.stats["prompt_tokens"].sum())
    assert result.cached_tokens == int(result.stats["cached_tokens"].sum())
    assert result.prefill_tokens == result.prompt_tokens - result.cached_tokens
    assert list(result.stats["prefill_tokens"]) == list(
        result.stats["prompt_tokens"] - result.stats["cached_tokens"]
    )
    engine_stats = await engine.stats()
    assert engine_stats.prefix_cache_queries_tokens == result.prompt_tokens
    assert engine_stats.prefix_cache_hits_tokens == result.cached_tokens


def test_synchronous_run_matches_arun() -> None:
    plan = kalypso.table(docs()).sem_filter("Does the {text} mention the battery?")
    sync = plan.run(SimEngine(num_blocks=64, block_size_tokens=16))
    assert sync.policy == "adaptive"
    assert list(sync.frame.columns) == ["doc_id", "text"]
    assert sync.llm_calls == len(docs())
    # a second engine on a second event loop gives the same answers
    again = plan.run(SimEngine(num_blocks=64, block_size_tokens=16))
    pd.testing.assert_frame_equal(sync.frame, again.frame)


async def test_plan_with_no_operators_returns_the_source(make_engine: EngineFactory) -> None:
    result = await kalypso.table(docs()).arun(make_engine())
    pd.testing.assert_frame_equal(result.frame, docs())
    assert result.llm_calls == 0


# --------------------------------------------------------------------------- custom operator shapes


class OldStyleUppercase(PipelinedOperator):
    """An operator written against the old API: an ``apply`` coroutine, no ``lower``."""

    kind = "old_uppercase"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def output_schema(self, schema: Schema) -> Schema:
        return (*schema, "upper")

    def describe(self) -> str:
        return "old_uppercase"

    async def apply(self, row: Any, ctx: Any, op_id: str, priority: int) -> Any:
        return row


class Shapeless(Operator):
    """An operator that is neither pipelined, blocking nor a Cartesian product."""

    kind = "shapeless"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def output_schema(self, schema: Schema) -> Schema:
        return schema

    def describe(self) -> str:
        return "shapeless"


class MyBarrier(BlockingOperator):
    """A custom blocking operator: the executor runs only the built-in barriers."""

    kind = "my_barrier"

    def output_schema(self, schema: Schema) -> Schema:
        return schema

    def describe(self) -> str:
        return "my_barrier"


@pytest.mark.parametrize(
    ("operator", "message"),
    [
        (OldStyleUppercase(), r"old_uppercase: the operator OldStyleUppercase declares no call"),
        (Shapeless(), r"neither pipelined, blocking nor a Cartesian product"),
        (MyBarrier(), r"my_barrier: blocking operators are the built-in sem_topk and sem_agg"),
    ],
    ids=["pipelined-without-lower", "no-base-shape", "custom-barrier"],
)
def test_an_operator_without_a_call_shape_is_refused_when_the_plan_is_built(
    operator: Operator, message: str
) -> None:
    with pytest.raises(PlanError, match=message) as error:
        kalypso.table(docs()).sem_filter("Is the {text} ok?").apply(operator)
    if not isinstance(operator, MyBarrier):
        assert "LLMOperator" in str(error.value) and "RowOperator" in str(error.value)


class Sentiment(LLMOperator):
    """A custom one-call-per-tuple operator: a one-token decision among two labels."""

    kind = "sentiment"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)
    choices = ("positive", "negative")

    def __init__(self, instruction: str) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)
        self.task = self.instruction.task_text() + " Answer positive or negative."

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        return (*schema, "sentiment")

    def describe(self) -> str:
        return f"sentiment {self.instruction.text!r}"

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None and outcome.decision is not None
        return {"sentiment": outcome.decision}


class Summary(LLMOperator):
    """A custom generative operator: a long answer that starts below its cap, asked only
    for texts that mention the battery (``ask``)."""

    kind = "summary"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)
    max_tokens = 64
    first_bound_tokens = 16

    def __init__(self) -> None:
        self.instruction = Instruction.parse("Summarize the {text}.", operator=self.kind)
        self.task = self.instruction.task_text()

    def output_schema(self, schema: Schema) -> Schema:
        return (*schema, "summary")

    def describe(self) -> str:
        return "summary"

    def ask(self, values: Values) -> bool:
        return "battery" in str(values["text"])

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        return {"summary": outcome.text.strip() if outcome is not None else ""}


async def test_a_custom_llm_operator_is_sized_like_sem_filter(make_engine: EngineFactory) -> None:
    """The scheduler reserves KV blocks for a custom LLMOperator's calls from its own
    prompt, as for a built-in one: one-token decisions on the same context reserve the
    same blocks."""
    custom = kalypso.table(docs()).apply(Sentiment("What is the sentiment of the {text}?"))
    builtin = kalypso.table(docs()).sem_filter("What is the sentiment of the {text}?")
    custom_result = await custom.arun(make_engine(), policy="sequential")
    builtin_result = await builtin.arun(make_engine(), policy="sequential")

    assert custom_result.peak_reserved_blocks > 0
    assert abs(custom_result.peak_reserved_blocks - builtin_result.peak_reserved_blocks) <= 1
    assert set(custom_result.frame["sentiment"]) <= {"positive", "negative"}
    stats = {s.operator: s for s in custom_result.operator_stats}["1:sentiment"]
    assert (stats.calls, stats.decisions, stats.requests) == (4, 4, 4)
    launches = custom_result.pipeline_reports[0].launches
    assert [launch.total_blocks for launch in launches] == [
        launch.total_blocks for launch in builtin_result.pipeline_reports[0].launches
    ]


async def test_a_custom_generative_operator_is_asked_only_when_it_says_so(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(outputs=SimOutputModel(min_output_tokens=4, max_output_tokens=8))
    result = await kalypso.table(docs()).apply(Summary()).arun(engine)
    stats = {s.operator: s for s in result.operator_stats}["1:summary"]
    assert stats.calls == 2  # the two texts about the battery
    assert [bool(s) for s in result.frame["summary"]] == [True, False, False, True]
    assert result.peak_reserved_blocks > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": ""}, "needs ``task``"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"max_tokens": True}, "max_tokens must be a positive integer"),
        ({"first_bound_tokens": 2.5}, "first_bound_tokens must be a positive integer"),
        ({"choices": ("only",)}, "at least two distinct non-empty strings"),
        ({"choices": ("a", "a")}, "at least two distinct non-empty strings"),
        ({"choices": ["a", "b"]}, "at least two distinct non-empty strings"),
        ({"choices": ("a", "b"), "first_bound_tokens": 8}, "not both"),
        ({"instruction": "Summarize the {text}."}, "needs ``instruction``, an Instruction"),
    ],
)
def test_an_incomplete_llm_operator_is_refused_when_the_plan_is_built(
    change: dict[str, Any], message: str
) -> None:
    operator = Summary()
    for name, value in change.items():
        setattr(operator, name, value)
    with pytest.raises(PlanError, match=f"^summary: .*{message}"):
        kalypso.table(docs()).apply(operator)
