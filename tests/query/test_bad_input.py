"""Bad input fails with :class:`PlanError` before any LLM call.

Errors in the plan itself are raised while it is built (no plan object exists to run).
Errors in the data or the run options are raised by ``arun`` before the first request:
every such test runs on a :class:`CountingSim` and checks that no request reached it and
that its prefix cache was never queried.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import kalypso
from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, SimOutputModel, WordTokenizer
from kalypso.query import IndexJoin, PlanError, SemClassify, Table
from kalypso.query.rows import Row
from kalypso.query.templates import Instruction, value_to_text


class CountingSim(SimEngine):
    """The simulator, remembering every request submitted to it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        return await super().generate(request)


EngineFactory = Callable[..., CountingSim]


@pytest.fixture
async def make_engine() -> AsyncIterator[EngineFactory]:
    engines: list[CountingSim] = []

    def make(**kwargs: Any) -> CountingSim:
        kwargs.setdefault("num_blocks", 256)
        kwargs.setdefault("block_size_tokens", 16)
        kwargs.setdefault("outputs", SimOutputModel(yes_rate=1.0))
        engine = CountingSim(**kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()


async def assert_untouched(engine: CountingSim) -> None:
    assert engine.requests == []
    stats = await engine.stats()
    assert stats.prefix_cache_queries_tokens == 0
    assert engine.num_steps == 0


def docs() -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [0, 1, 2], "text": ["alpha", "beta", "gamma"]})


def base() -> Table:
    return kalypso.table(docs(), name="docs")


HYPOTHESES = pd.DataFrame({"hypothesis": ["it is secret", "it expires"]})


# --------------------------------------------------------------------------- plan errors


@pytest.mark.parametrize(
    ("build", "operator"),
    [
        (lambda t: t.sem_filter("Is the {txt} ok?"), "sem_filter"),
        (lambda t: t.sem_map("Summarize the {body}.", "s"), "sem_map"),
        (lambda t: t.sem_extract("Read the {body}.", ["a"]), "sem_extract"),
        (lambda t: t.sem_classify("Classify the {body}.", ["x", "y"]), "sem_classify"),
        (lambda t: t.sem_topk("Rank the {body}.", k=1), "sem_topk"),
        (lambda t: t.sem_agg("Summarize every {body}."), "sem_agg"),
        (lambda t: t.index_search(["p"], "{body}", k=1), "index_search"),
        (lambda t: t.sem_join(HYPOTHESES, "Does {text} entail {claim}?"), "sem_join"),
        (
            lambda t: t.sem_join(
                HYPOTHESES,
                "Does {text} entail {hypothesis}?",
                index=IndexJoin("{body}", "hypothesis"),
            ),
            "sem_join index",
        ),
        # a column exists only after the operator that makes it
        (
            lambda t: t.sem_filter("Is {summary} short?").sem_map("Sum {text}", "summary"),
            "sem_filter",
        ),
    ],
    ids=[
        "filter",
        "map",
        "extract",
        "classify",
        "topk",
        "agg",
        "index_search",
        "join",
        "join-index",
        "column-used-before-made",
    ],
)
def test_instruction_referencing_a_missing_column(
    build: Callable[[Table], Table], operator: str
) -> None:
    with pytest.raises(PlanError) as error:
        build(base())
    message = str(error.value)
    assert message.startswith(f"{operator}: instruction references missing column(s)")
    assert "available: ['doc_id', 'text'" in message


def test_missing_column_message_names_every_missing_column() -> None:
    with pytest.raises(PlanError, match=r"\['title', 'body'\]"):
        base().sem_map("Compare the {title} with the {body} and the {text}.", "c")


@pytest.mark.parametrize("instruction", ["", "   ", "\n\t"])
@pytest.mark.parametrize(
    ("build", "operator"),
    [
        (lambda t, i: t.sem_filter(i), "sem_filter"),
        (lambda t, i: t.sem_map(i, "s"), "sem_map"),
        (lambda t, i: t.sem_extract(i, ["a"]), "sem_extract"),
        (lambda t, i: t.sem_classify(i, ["x", "y"]), "sem_classify"),
        (lambda t, i: t.sem_topk(i, k=1), "sem_topk"),
        (lambda t, i: t.sem_agg(i), "sem_agg"),
        (lambda t, i: t.index_search(["p"], i, k=1), "index_search"),
        (lambda t, i: t.sem_join(HYPOTHESES, i), "sem_join"),
    ],
    ids=["filter", "map", "extract", "classify", "topk", "agg", "index_search", "join"],
)
def test_empty_instruction(
    build: Callable[[Table, str], Table], operator: str, instruction: str
) -> None:
    with pytest.raises(PlanError, match=f"^{operator}: the instruction is empty$"):
        build(base(), instruction)


def test_unknown_operator_name_lists_the_registered_ones() -> None:
    with pytest.raises(
        PlanError, match=r"unknown operator 'sem_frobnicate'; registered: \[.*'sem_map'"
    ):
        base().op("sem_frobnicate", "Frobnicate the {text}.")


@pytest.mark.parametrize(
    "labels",
    [[], ["only"], ["yes", ""], ["yes", "   "], ["Yes", "yes"], None],
    ids=["empty", "one", "empty-label", "blank-label", "case-duplicate", "none"],
)
def test_sem_classify_needs_two_distinct_labels(labels: list[str] | None) -> None:
    with pytest.raises(PlanError, match=r"^sem_classify: "):
        base().sem_classify("Classify the {text}.", labels)  # type: ignore[arg-type]


def test_sem_classify_strips_labels() -> None:
    assert SemClassify("Classify {text}.", [" pos ", "neg"]).labels == ("pos", "neg")


@pytest.mark.parametrize(
    ("right", "message"),
    [
        (pd.DataFrame({"hypothesis": []}), "the right-side table 'right' is empty"),
        (
            kalypso.table(pd.DataFrame({"h": []}), name="hyps"),
            "the right-side table 'hyps' is empty",
        ),
        (None, "the right-side table is missing"),
        ([{"hypothesis": "x"}], "the right side must be a DataFrame or kalypso.Table"),
        (
            kalypso.table(HYPOTHESES).sem_filter("Is {hypothesis} ok?"),
            "the right side must be a static table",
        ),
    ],
    ids=["empty-frame", "empty-table", "none", "list", "plan"],
)
def test_join_against_a_bad_right_side(right: Any, message: str) -> None:
    with pytest.raises(PlanError, match=f"^sem_join: {message}"):
        base().sem_join(right, "Does {text} entail {hypothesis}?")


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (IndexJoin("{text}", "claim"), "right column 'claim' not in"),
        (IndexJoin("{text}", "hypothesis", k=None), "give k, max_distance, or both"),
        (IndexJoin("{text}", "hypothesis", k=0), "k must be positive"),
        (IndexJoin("", "hypothesis"), "the instruction is empty"),
    ],
    ids=["right-column", "no-bound", "k", "empty-query"],
)
def test_bad_index_join(index: IndexJoin, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        base().sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?", index=index)


def test_reversed_cascade_thresholds_raise_plan_error() -> None:
    index = IndexJoin("{text}", "hypothesis", accept_below=0.8, reject_above=0.2)
    with pytest.raises(PlanError):
        base().sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?", index=index)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda t: t.sem_map("Sum {text}.", "text"), "output column 'text' already exists"),
        (lambda t: t.sem_map("Sum {text}.", "two words"), "must be an identifier"),
        (lambda t: t.sem_extract("Read {text}.", []), "at least one output field"),
        (lambda t: t.sem_extract("Read {text}.", ["a", "a"]), "duplicate field names"),
        (lambda t: t.sem_extract("Read {text}.", ["doc_id"]), "'doc_id' already exists"),
        (lambda t: t.sem_topk("Rank {text}.", k=0), "k must be positive"),
        (
            lambda t: t.sem_topk("Rank {text}.", k=1).sem_topk("Rank {text}.", k=1),
            "'topk_score' already exists",
        ),
        (lambda t: t.index_search([], "{text}", k=1), "the corpus is empty"),
        (lambda t: t.index_search(["p"], "{text}", k=0), "k must be positive"),
        (lambda t: t.index_search(["p"], "{text}", k=1, output_column="text"), "already exists"),
        (lambda t: t.map(lambda r: 1, "doc_id"), "already exists"),
        (lambda t: t.map("not callable", "x"), "fn must be callable"),
        (lambda t: t.filter(None), "predicate must be callable"),
        (lambda t: t.apply("sem_filter"), "is not a kalypso Operator"),
    ],
    ids=[
        "map-exists",
        "map-identifier",
        "extract-empty",
        "extract-duplicate",
        "extract-exists",
        "topk-k",
        "topk-twice",
        "search-empty",
        "search-k",
        "search-exists",
        "py-map-exists",
        "py-map-callable",
        "py-filter-callable",
        "apply-non-operator",
    ],
)
def test_bad_operator_arguments(build: Callable[[Table], Table], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        build(base())


@pytest.mark.parametrize(
    "data",
    [[1, 2], "text", [{"a": 1}, ["b"]], pd.DataFrame({0: ["x"]})],
    ids=["list-of-ints", "string", "mixed-list", "int-column-name"],
)
def test_bad_table_input(data: Any) -> None:
    with pytest.raises(PlanError):
        kalypso.table(data)


# --------------------------------------------------------------------------- run options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policy": "eager"}, "unknown execution policy 'eager'"),
        ({"policy": "Pipelined"}, "unknown execution policy 'Pipelined'"),
        ({"max_tasks_in_flight": 0}, "max_tasks_in_flight must be at least 1"),
    ],
    ids=["unknown-policy", "policy-case", "no-tasks"],
)
async def test_bad_run_options(
    make_engine: EngineFactory, options: dict[str, Any], message: str
) -> None:
    engine = make_engine()
    with pytest.raises(PlanError, match=message):
        await base().sem_filter("Is {text} ok?").arun(engine, **options)
    await assert_untouched(engine)


async def test_negative_max_retries_is_a_plan_error(make_engine: EngineFactory) -> None:
    engine = make_engine()
    with pytest.raises(PlanError):
        await base().sem_map("Summarize {text}.", "s").arun(engine, max_retries=-1)
    await assert_untouched(engine)


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("frame", "column", "row"),
    [
        (pd.DataFrame({"text": ["a", None, "c"]}), "text", 1),
        (pd.DataFrame({"text": ["a", "b", float("nan")]}), "text", 2),
        (pd.DataFrame({"text": ["a", "b", "c"], "score": [1.0, math.nan, 3.0]}), "score", 1),
        (pd.DataFrame({"text": ["a", "b", "c"], "score": [1, None, 3]}), "score", 1),
        (pd.DataFrame({"text": [None, "b", "c"]}).astype("string"), "text", 0),
    ],
    ids=["none", "nan-in-text", "nan-float", "none-in-int-column", "pd-NA"],
)
async def test_missing_values_are_rejected_naming_row_and_column(
    make_engine: EngineFactory, frame: pd.DataFrame, column: str, row: int
) -> None:
    plan = kalypso.table(frame).sem_filter("Is {text} ok?").sem_map(f"Explain {{{column}}}.", "e")
    engine = make_engine()
    with pytest.raises(PlanError, match=rf"column '{column}', row \({row},\)"):
        await plan.arun(engine)
    await assert_untouched(engine)


async def test_missing_value_in_a_column_used_only_by_a_later_operator(
    make_engine: EngineFactory,
) -> None:
    frame = pd.DataFrame({"text": ["a", "b", "c"], "notes": ["x", "y", None]})
    plan = (
        kalypso.table(frame)
        .sem_filter("Is {text} ok?")
        .sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?")
        .sem_map("Explain {notes}.", "e")
    )
    engine = make_engine()
    with pytest.raises(PlanError, match=r"column 'notes', row \(2,\): missing value"):
        await plan.arun(engine, policy="operator-at-a-time")
    await assert_untouched(engine)


async def test_missing_value_in_the_right_table_fails_before_any_call(
    make_engine: EngineFactory,
) -> None:
    right = pd.DataFrame({"hypothesis": ["it is secret", None]})
    plan = (
        base()
        .sem_filter("Is {text} a contract?")
        .sem_join(right, "Does {text} entail {hypothesis}?")
    )
    engine = make_engine()
    with pytest.raises(PlanError, match=r"column 'hypothesis'"):
        await plan.arun(engine)
    await assert_untouched(engine)


@pytest.mark.parametrize("blocking", ["sem_topk", "sem_agg"])
async def test_missing_value_used_by_a_blocking_operator_fails_before_any_call(
    make_engine: EngineFactory, blocking: str
) -> None:
    frame = pd.DataFrame({"text": ["a", "b", "c"], "notes": ["x", None, "z"]})
    plan = kalypso.table(frame).sem_filter("Is {text} ok?")
    plan = (
        plan.sem_topk("Best {notes}?", k=1)
        if blocking == "sem_topk"
        else plan.sem_agg("Summarize every {notes}.")
    )
    engine = make_engine()
    with pytest.raises(PlanError, match=r"column 'notes', row \(1,\)"):
        await plan.arun(engine)
    await assert_untouched(engine)


@pytest.mark.xfail(
    strict=True,
    reason="executor.precheck rejects None in every source row, also in rows that a "
    "pure-Python filter earlier in the plan removes, so they never reach a prompt",
)
async def test_rows_removed_by_a_python_filter_are_not_checked(
    make_engine: EngineFactory,
) -> None:
    frame = pd.DataFrame({"text": ["a", None, "c"]})
    plan = kalypso.table(frame).filter(lambda r: r["text"] is not None).sem_map("Sum {text}", "s")
    result = await plan.arun(make_engine())
    assert list(result.frame["text"]) == ["a", "c"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (7, "7"),
        (np.int64(7), "7"),
        (2.5, "2.5"),
        (np.float32(0.5), "0.5"),
        (True, "True"),
        (np.bool_(False), "False"),
        (["a", 1, 2.5], "a; 1; 2.5"),
        (("x", ("y", "z")), "x; y; z"),
        ([], ""),
        ({"b": 2, "a": [1, None]}, '{"a": [1, null], "b": 2}'),
    ],
    ids=[
        "str",
        "int",
        "np-int",
        "float",
        "np-float",
        "bool",
        "np-bool",
        "list",
        "nested-tuple",
        "empty-list",
        "dict",
    ],
)
def test_value_to_text_rule(value: Any, text: str) -> None:
    assert value_to_text(value, "v") == text
    assert Instruction.parse("<{v}>", operator="t").render({"v": value}) == f"<{text}>"
    tokenizer = WordTokenizer()
    piece = Row((0,), {"v": value}).piece("v", tokenizer)
    assert tokenizer.decode(piece) == f"[v]\n{text}\n\n"


def test_render_unescapes_literal_braces() -> None:
    instruction = Instruction.parse("Is {{text}} in {text}?", operator="t")
    assert instruction.columns == ("text",)
    assert instruction.task_text() == "Is {text} in text?"
    assert instruction.render({"text": 3}) == "Is {text} in 3?"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "missing value"),
        (float("nan"), "missing value"),
        (np.float64("nan"), "missing value"),
        (["a", None], "missing value"),
        ({"a", "b"}, "values of type set cannot be put in a prompt"),
        (object(), "values of type object cannot be put in a prompt"),
        (b"bytes", "values of type bytes cannot be put in a prompt"),
    ],
    ids=["none", "nan", "np-nan", "none-in-list", "set", "object", "bytes"],
)
def test_value_to_text_rejects(value: Any, message: str) -> None:
    with pytest.raises(PlanError, match=rf"^column 'v', row \(4, 1\): .*{message}"):
        value_to_text(value, "v", (4, 1))


def test_numpy_array_is_rendered_like_a_list_or_rejected() -> None:
    try:
        text = value_to_text(np.array(["A1", "A2"]), "ids", (0,))
    except PlanError:
        return
    assert text == "A1; A2"


async def test_unsupported_value_type_in_a_source_row(make_engine: EngineFactory) -> None:
    frame = pd.DataFrame({"text": ["a", "b"], "tags": [{"x"}, {"y"}]})
    engine = make_engine()
    with pytest.raises(PlanError, match=r"column 'tags', row \(0,\): values of type set"):
        await kalypso.table(frame).sem_map("Describe {tags}.", "d").arun(engine)
    await assert_untouched(engine)


async def test_converted_values_reach_the_prompt(make_engine: EngineFactory) -> None:
    """ints, lists and dicts are accepted and appear in the prompt as the rule renders them."""
    frame = pd.DataFrame({"n": [3], "tags": [["red", "blue"]], "meta": [{"k": 1}]})
    engine = make_engine()
    await kalypso.table(frame).sem_map("Describe {n} {tags} {meta}.", "d").arun(engine)
    [request] = engine.requests
    prompt = engine.tokenizer.decode(request.prompt_token_ids)
    assert '[n]\n3\n\n[tags]\nred; blue\n\n[meta]\n{"k": 1}\n\n' in prompt
    assert prompt.endswith("Describe n tags meta.<|im_end|>\n<|im_start|>assistant\n")


# --------------------------------------------------------------------------- prompt size


@pytest.mark.parametrize("policy", ["pipelined", "operator-at-a-time"])
async def test_prompt_longer_than_the_context_names_the_row(
    make_engine: EngineFactory, policy: str
) -> None:
    long_text = " ".join(["word"] * 200)
    frame = pd.DataFrame({"text": ["short", "also short", long_text, "short"]})
    engine = make_engine(max_model_len_tokens=128)
    plan = kalypso.table(frame).sem_filter("Is the {text} ok?").sem_map("Sum {text}.", "s")
    with pytest.raises(
        PlanError,
        match=r"^\[1:sem_filter\] row 2: prompt of \d+ tokens plus 8 output tokens exceeds "
        r"the model context of 128$",
    ):
        await plan.arun(engine, policy=policy)
    await assert_untouched(engine)


async def test_prompt_size_check_counts_the_output_bound(make_engine: EngineFactory) -> None:
    """A prompt that fits alone but not with the operator's max_tokens is rejected too."""
    frame = pd.DataFrame({"text": ["a few words of text"]})
    plan = kalypso.table(frame).sem_map("Sum {text}.", "s", max_tokens=64)
    probe = make_engine()
    await plan.arun(probe)
    prompt_tokens = len(probe.requests[0].prompt_token_ids)

    engine = make_engine(max_model_len_tokens=prompt_tokens + 63)
    with pytest.raises(PlanError, match=rf"row 0: prompt of {prompt_tokens} tokens plus 64"):
        await plan.arun(engine)
    await assert_untouched(engine)
    fits = make_engine(max_model_len_tokens=prompt_tokens + 64)
    assert len((await plan.arun(fits)).frame) == 1


async def test_prompt_size_check_uses_the_hard_cap_not_the_first_bound(
    make_engine: EngineFactory,
) -> None:
    """sem_map may retry up to its cap (default 256), so the cap must fit the context even
    though the first call is issued with a smaller bound."""
    frame = pd.DataFrame({"text": ["a few words of text"]})
    plan = kalypso.table(frame).sem_map("Sum {text}.", "s")  # first bound 64, cap 256
    probe = make_engine()
    await plan.arun(probe)
    [first_call] = probe.requests
    assert first_call.max_tokens == 64
    prompt_tokens = len(first_call.prompt_token_ids)

    engine = make_engine(max_model_len_tokens=prompt_tokens + 128)
    with pytest.raises(
        PlanError, match=rf"row 0: prompt of {prompt_tokens} tokens plus 256 output"
    ):
        await plan.arun(engine)
    await assert_untouched(engine)


@pytest.mark.parametrize(
    "build",
    [
        lambda t: t.sem_filter("Is {text} ok?", max_tokens=0),
        lambda t: t.sem_map("Sum {text}.", "s", max_tokens=0),
        lambda t: t.sem_map("Sum {text}.", "s", first_bound_tokens=-1),
        lambda t: t.sem_extract("Read {text}.", ["a"], max_tokens=0),
        lambda t: t.sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?", max_tokens=0),
        pytest.param(
            lambda t: t.sem_classify("Classify {text}.", ["x", "y"], max_tokens=0),
        ),
        pytest.param(
            lambda t: t.sem_agg("Summarize {text}.", max_tokens=0),
        ),
    ],
    ids=["filter", "map", "map-first-bound", "extract", "join", "classify", "agg"],
)
def test_token_bounds_must_be_positive(build: Callable[[Table], Table]) -> None:
    with pytest.raises(PlanError, match="token bounds must be positive integers"):
        build(base())
