"""Bad input fails with :class:`PlanError` before any LLM call.

Errors in the plan itself are raised while it is built (no plan object exists to run).
Errors in the data or the run options are raised by ``arun`` before the first request:
every such test runs on a :class:`CountingSim` and checks that no request reached it and
that its prefix cache was never queried. Messages name the operator (``[2:sem_map]`` or
``sem_map:``), the row and the column where they apply.

The cases are grouped by what is malformed: templates, operator arguments, right sides
and indexes, tables, run options, values, and sizes. ``ISSUE_9`` marks the inputs of the
reviewer's report (issue 9, item 7) that went wrong before.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

import kalypso
from kalypso.core.instance import CallOutcome, Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.prompt import ChatLayout
from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, SimOutputModel, WordTokenizer
from kalypso.query import (
    IndexJoin,
    LLMOperator,
    OperatorContract,
    PlanError,
    RunOptions,
    SemClassify,
    Table,
    register_operator,
)
from kalypso.query.operators import Schema, Values
from kalypso.query.rows import piece_ids
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


async def refused(engine: CountingSim, plan: Table, match: str, **options: Any) -> None:
    """``plan.arun(engine, **options)`` raises a PlanError matching ``match`` and sends
    nothing."""
    with pytest.raises(PlanError, match=match):
        await plan.arun(engine, **options)
    await assert_untouched(engine)


def docs() -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [0, 1, 2], "text": ["alpha", "beta", "gamma"]})


def base() -> Table:
    return kalypso.table(docs(), name="docs")


HYPOTHESES = pd.DataFrame({"hypothesis": ["it is secret", "it expires"]})
ISSUE_9 = pytest.mark.issue_9
"""A malformed input of the reviewer's report (issue 9, item 7)."""


def builds(build: Callable[[Table], Table], match: str, **marks: Any) -> Any:
    return pytest.param(build, match, **marks)


# --------------------------------------------------------------------------- templates


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
        # a right-side column exists only after the join
        (
            lambda t: t.sem_filter("Is {hypothesis} ok?").sem_join(
                HYPOTHESES, "Is {text} {hypothesis}?"
            ),
            "sem_filter",
        ),
        # a name with inner spaces refers to a column of that exact name
        pytest.param(
            lambda t: t.sem_filter("Is the {review text} ok?"), "sem_filter", marks=ISSUE_9
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
        "right-column-before-join",
        "inner-space",
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


@pytest.mark.parametrize(
    ("instruction", "message"),
    [
        pytest.param("Is {text ok?", r"unmatched '\{' at position 3", marks=ISSUE_9),
        pytest.param("Is text} ok?", r"unmatched '\}' at position 7", marks=ISSUE_9),
        pytest.param(
            "Is { text } ok?", r"'\{ text \}' .* spaces around the column name", marks=ISSUE_9
        ),
        ("Is {text } ok?", r"spaces around the column name; write \{text\}"),
        ("Is {} ok?", r"empty braces '\{\}'"),
        ("Is { } ok?", r"empty braces"),
        ("Is {{text} ok?", r"unmatched '\}'"),
        ("Is {text}} ok?", r"unmatched '\}'"),
        ("Is {te{xt} ok?", r"unmatched '\{' at position 3"),
        ('Answer in JSON like {"a": 1} about {text}', r"missing column\(s\) \['\"a\": 1'\]"),
    ],
    ids=[
        "unclosed",
        "unopened",
        "spaced",
        "trailing-space",
        "empty-braces",
        "blank-braces",
        "literal-then-close",
        "close-twice",
        "nested-open",
        "json-literal",
    ],
)
def test_malformed_template(instruction: str, message: str) -> None:
    """Before, each of these ran with no document in the prompt (the reference was not
    recognised and the braces stayed in the task text)."""
    with pytest.raises(PlanError, match=f"^sem_filter: .*{message}"):
        base().sem_filter(instruction)


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda t: t.sem_filter("Is it ok?"), marks=ISSUE_9),
        lambda t: t.sem_map("Summarize it.", "s"),
        lambda t: t.sem_extract("Read it.", ["a"]),
        lambda t: t.sem_classify("Classify it.", ["x", "y"]),
        lambda t: t.sem_topk("Which is best?", k=1),
        lambda t: t.sem_agg("Summarize everything."),
        lambda t: t.index_search(["p"], "a fixed query", k=1),
        lambda t: t.sem_join(HYPOTHESES, "Are they related?"),
        lambda t: t.sem_filter("Is {{text}} ok?"),  # literal braces only
        lambda t: t.sem_join(
            HYPOTHESES, "Does {text} entail {hypothesis}?", index=IndexJoin("text", "hypothesis")
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
        "escaped-braces-only",
        "index-left",
    ],
)
def test_instruction_without_a_column_reference(build: Callable[[Table], Table]) -> None:
    with pytest.raises(PlanError, match="references no column, so the LLM would see no document"):
        build(base())


@pytest.mark.parametrize("instruction", [5, None, ["Is {text} ok?"], b"Is {text} ok?"])
def test_instruction_that_is_not_a_string(instruction: Any) -> None:
    with pytest.raises(PlanError, match=r"^sem_filter: the instruction must be a string"):
        base().sem_filter(instruction)


def test_instruction_with_a_lone_surrogate() -> None:
    with pytest.raises(PlanError, match=r"sem_map: the instruction: the text is not valid Unicode"):
        base().sem_map("Summarize the {text} \ud800.", "s")


def test_unknown_operator_name_lists_the_registered_ones() -> None:
    with pytest.raises(
        PlanError, match=r"unknown operator 'sem_frobnicate'; registered: \[.*'sem_map'"
    ):
        base().op("sem_frobnicate", "Frobnicate the {text}.")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, r"sem_map: missing a required argument: 'instruction'"),
        (("Sum {text}.",), {}, r"sem_map: missing a required argument: 'output_column'"),
        (("Sum {text}.", "s"), {"tokens": 8}, r"sem_map: got an unexpected keyword argument"),
        (("Is {text} ok?", "extra"), {}, r"sem_filter: too many positional arguments"),
    ],
    ids=["no-args", "no-output", "unknown-keyword", "too-many"],
)
def test_registered_operator_with_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    name = "sem_filter" if "filter" in message else "sem_map"
    with pytest.raises(PlanError, match=message):
        base().op(name, *args, **kwargs)


def test_register_operator_rejects_bad_names() -> None:
    with pytest.raises(ValueError, match="identifier"):
        register_operator("two words", SemClassify)
    with pytest.raises(ValueError, match="already registered"):
        register_operator("sem_map", SemClassify)


# --------------------------------------------------------------------------- operator arguments


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
    ("build", "message"),
    [
        # issue 9: a string where a list is expected was split into characters
        builds(
            lambda t: t.sem_classify("Classify {text}.", "pos"),  # type: ignore[arg-type]
            r"sem_classify: labels must be a list of strings, got 'pos'",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_extract("Read {text}.", "name"),  # type: ignore[arg-type]
            r"sem_extract: fields must be a list of strings, got 'name'",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.index_search("some passage", "{text}", k=1),
            r"index_search: the corpus must be a list of passages \(strings\), got str",
            marks=ISSUE_9,
        ),
        # issue 9: a string or a bool where a flag or a count is expected
        builds(
            lambda t: t.sem_filter("Is {text} ok?", negate="no"),
            r"sem_filter: negate must be True or False, got 'no'",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_topk("Rank {text}.", k=True),
            r"sem_topk: k must be a positive integer, got True",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_map("Sum {text}.", "s", max_tokens=True),
            r"sem_map: max_tokens must be a positive integer, got True",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_topk("Rank {text}.", k="2"),  # type: ignore[arg-type]
            r"sem_topk: k must be a positive integer, got '2'",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_topk("Rank {text}.", k=1.5),  # type: ignore[arg-type]
            r"sem_topk: k must be a positive integer, got 1.5",
            marks=ISSUE_9,
        ),
        # issue 9: output columns that are not identifiers
        builds(
            lambda t: t.sem_map("Sum {text}.", 5),  # type: ignore[arg-type]
            r"sem_map: output column 5 must be an identifier",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_map("Sum {text}.", ""),
            r"sem_map: output column '' must be an identifier",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_map("Sum {text}.", None),  # type: ignore[arg-type]
            r"sem_map: output column None must be an identifier",
            marks=ISSUE_9,
        ),
        builds(
            lambda t: t.sem_map("Sum {text}.", "a b"),
            r"sem_map: output column 'a b' must be an identifier",
            marks=ISSUE_9,
        ),
        # the same for every operator that adds a column
        builds(lambda t: t.sem_map("Sum {text}.", "text"), "output column 'text' already exists"),
        builds(
            lambda t: t.sem_classify("Classify {text}.", ["x", "y"], "my label"),
            r"sem_classify: output column 'my label' must be an identifier",
        ),
        builds(
            lambda t: t.sem_classify("Classify {text}.", ["x", "y"], "doc_id"),
            r"sem_classify: output column 'doc_id' already exists",
        ),
        builds(
            lambda t: t.sem_agg("Summarize {text}.", "the report"),
            r"sem_agg: output column 'the report' must be an identifier",
        ),
        builds(
            lambda t: t.index_search(["p"], "{text}", k=1, output_column="text"), "already exists"
        ),
        builds(
            lambda t: t.index_search(["p"], "{text}", k=1, output_column="1st"),
            "must be an identifier",
        ),
        builds(lambda t: t.map(lambda r: 1, "doc_id"), "map: output column 'doc_id' already"),
        builds(lambda t: t.map(lambda r: 1, "two words"), "map: output column 'two words' must"),
        builds(lambda t: t.sem_extract("Read {text}.", []), "at least one output field"),
        builds(lambda t: t.sem_extract("Read {text}.", ["a", "a"]), "duplicate field names"),
        builds(lambda t: t.sem_extract("Read {text}.", ["doc_id"]), "'doc_id' already exists"),
        builds(
            lambda t: t.sem_extract("Read {text}.", ["drug dose"]),
            r"sem_extract: output column 'drug dose' must be an identifier",
        ),
        builds(
            lambda t: t.sem_extract("Read {text}.", ["a", 3]),  # type: ignore[list-item]
            r"sem_extract: fields must be a list of strings",
        ),
        builds(
            lambda t: t.sem_classify("Classify {text}.", [1, 2]),  # type: ignore[list-item]
            r"sem_classify: labels must be a list of strings",
        ),
        builds(
            lambda t: t.sem_classify("Classify {text}.", [f"label{i}" for i in range(27)]),
            "at most 26 labels",
        ),
        builds(
            lambda t: t.sem_classify("Classify {text}.", ["ok", "bad \ud800"]),
            r"sem_classify: label 1: the text is not valid Unicode",
        ),
        # token bounds: positive integers, and none for one-token decisions
        builds(lambda t: t.sem_map("Sum {text}.", "s", max_tokens=0), "max_tokens must be a"),
        builds(lambda t: t.sem_map("Sum {text}.", "s", max_tokens=-3), "max_tokens must be a"),
        builds(lambda t: t.sem_map("Sum {text}.", "s", max_tokens=8.0), "max_tokens must be a"),
        builds(lambda t: t.sem_map("Sum {text}.", "s", max_tokens="64"), "max_tokens must be a"),
        builds(lambda t: t.sem_map("Sum {text}.", "s", max_tokens=None), "max_tokens must be a"),
        builds(
            lambda t: t.sem_map("Sum {text}.", "s", first_bound_tokens=-1),
            "sem_map: first_bound_tokens must be a positive integer, got -1",
        ),
        builds(
            lambda t: t.sem_map("Sum {text}.", "s", first_bound_tokens=False),
            "first_bound_tokens must be a positive integer, got False",
        ),
        builds(
            lambda t: t.sem_extract("Read {text}.", ["a"], max_tokens=0),
            "sem_extract: max_tokens must be a positive integer",
        ),
        builds(
            lambda t: t.sem_agg("Summarize {text}.", max_tokens=0),
            "sem_agg: max_tokens must be a positive integer",
        ),
        builds(
            lambda t: t.sem_filter("Is {text} ok?", max_tokens=8),
            r"sem_filter: its answer is one constrained token \(a decision\), so it takes no"
            " max_tokens",
        ),
        builds(
            lambda t: t.sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?", max_tokens=8),
            "sem_join: its answer is one constrained token",
        ),
        builds(
            lambda t: t.sem_classify("Classify {text}.", ["x", "y"], max_tokens=8),
            "sem_classify: its answer is one constrained token",
        ),
        builds(
            lambda t: t.sem_filter("Is {text} ok?", first_bound_tokens=4),
            "sem_filter: its answer is one constrained token .* no first_bound_tokens",
        ),
        builds(lambda t: t.sem_filter("Is {text} ok?", negate=1), "negate must be True or False"),
        builds(
            lambda t: t.sem_filter("Is {text} ok?", negate=None), "negate must be True or False"
        ),
        builds(
            lambda t: t.sem_join(HYPOTHESES, "Does {text} say {hypothesis}?", negate="yes"),
            "sem_join: negate must be True or False",
        ),
        builds(lambda t: t.sem_filter("Is {text} ok?", strict=True), "unexpected keyword"),
        builds(lambda t: t.sem_topk("Rank {text}.", k=0), "k must be a positive integer"),
        builds(lambda t: t.sem_topk("Rank {text}.", k=-2), "k must be a positive integer"),
        builds(
            lambda t: t.sem_topk("Rank {text}.", k=None),  # type: ignore[arg-type]
            "k must be a positive integer",
        ),
        builds(
            lambda t: t.sem_topk("Rank {text}.", k=1).sem_topk("Rank {text}.", k=1),
            "'topk_score' already exists",
        ),
        # index_search
        builds(lambda t: t.index_search([], "{text}", k=1), "the corpus is empty"),
        builds(lambda t: t.index_search(None, "{text}", k=1), "the corpus must be a list"),
        builds(lambda t: t.index_search(b"passages", "{text}", k=1), "the corpus must be a list"),
        builds(lambda t: t.index_search(42, "{text}", k=1), "the corpus must be a list"),
        builds(
            lambda t: t.index_search(["p", None], "{text}", k=1),
            r"index_search: passage 1 of the corpus is None, not a string",
        ),
        builds(lambda t: t.index_search([1, 2], "{text}", k=1), "passage 0 of the corpus is 1"),
        builds(
            lambda t: t.index_search(["ok", "bad \udfff"], "{text}", k=1),
            r"index_search: passage 1: the text is not valid Unicode",
        ),
        builds(lambda t: t.index_search(["p"], "{text}", k=0), "k must be a positive integer"),
        builds(
            lambda t: t.index_search(["p"], "{text}", k="2"),  # type: ignore[arg-type]
            "index_search: k must be a positive integer, got '2'",
        ),
        builds(
            lambda t: t.index_search(["p"], "{text}", k=1.5),  # type: ignore[arg-type]
            "index_search: k must be a positive integer, got 1.5",
        ),
        builds(
            lambda t: t.index_search(["p"], "{text}", k=True),
            "index_search: k must be a positive integer, got True",
        ),
        # plain Python operators and apply
        builds(lambda t: t.map("not callable", "x"), "fn must be callable"),
        builds(lambda t: t.filter(None), "predicate must be callable"),  # type: ignore[arg-type]
        builds(lambda t: t.apply("sem_filter"), "is not a kalypso Operator"),  # type: ignore[arg-type]
        builds(lambda t: t.apply(None), "is not a kalypso Operator"),  # type: ignore[arg-type]
        builds(
            lambda t: t.apply(kalypso.query.SemFilter),  # type: ignore[arg-type]
            "is not a kalypso Operator",
        ),
    ],
)
def test_bad_operator_arguments(build: Callable[[Table], Table], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        build(base())


# --------------------------------------------------------------------------- right sides, indexes


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
        ({"hypothesis": ["x"]}, "the right side must be a DataFrame or kalypso.Table"),
        ("hypotheses", "the right side must be a DataFrame or kalypso.Table"),
        (
            kalypso.table(HYPOTHESES).sem_filter("Is {hypothesis} ok?"),
            "the right side must be a static table",
        ),
        (
            pd.DataFrame({"text": ["a"], "text_right": ["b"]}),
            r"right columns would be renamed to \['text_right'\], which already exist",
        ),
    ],
    ids=["empty-frame", "empty-table", "none", "list", "dict", "string", "plan", "rename-clash"],
)
def test_join_against_a_bad_right_side(right: Any, message: str) -> None:
    with pytest.raises(PlanError, match=f"^sem_join: {message}"):
        base().sem_join(right, "Does {text} entail {hypothesis}?")


def test_join_rename_clash_with_an_existing_renamed_column() -> None:
    left = kalypso.table(pd.DataFrame({"text": ["a"], "text_right": ["b"]}))
    with pytest.raises(PlanError, match="already exist"):
        left.sem_join(pd.DataFrame({"text": ["c"]}), "Do {text} and {text_right} match?")


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (IndexJoin("{text}", "claim"), "right column 'claim' not in"),
        (IndexJoin("{text}", "hypothesis", k=None), "give k, max_distance, or both"),
        (IndexJoin("{text}", "hypothesis", k=0), "k must be a positive integer, got 0"),
        (IndexJoin("{text}", "hypothesis", k=-1), "k must be a positive integer"),
        (IndexJoin("{text}", "hypothesis", k=1.5), "k must be a positive integer, got 1.5"),  # type: ignore[arg-type]
        (IndexJoin("{text}", "hypothesis", k="2"), "k must be a positive integer, got '2'"),  # type: ignore[arg-type]
        (IndexJoin("{text}", "hypothesis", k=True), "k must be a positive integer, got True"),
        (IndexJoin("{text}", "hypothesis", max_distance=-0.5), "max_distance must be >= 0"),
        (
            IndexJoin("{text}", "hypothesis", max_distance=math.nan),
            "max_distance must be a finite number",
        ),
        (
            IndexJoin("{text}", "hypothesis", max_distance="0.3"),  # type: ignore[arg-type]
            "max_distance must be a finite number or None, got '0.3'",
        ),
        (
            IndexJoin("{text}", "hypothesis", accept_below="0.2"),  # type: ignore[arg-type]
            "accept_below must be a finite number or None, got '0.2'",
        ),
        (
            IndexJoin("{text}", "hypothesis", reject_above=math.inf),
            "reject_above must be a finite number or None, got inf",
        ),
        (
            IndexJoin("{text}", "hypothesis", accept_below=0.8, reject_above=0.2),
            r"accept_below \(0.8\) must be <= reject_above \(0.2\)",
        ),
        (IndexJoin("", "hypothesis"), "the instruction is empty"),
        (IndexJoin("{text", "hypothesis"), r"unmatched '\{'"),
        (IndexJoin(None, "hypothesis"), "the instruction must be a string"),  # type: ignore[arg-type]
        (IndexJoin("{text}", None), "right column None not in"),  # type: ignore[arg-type]
        ("{text}", "index must be a kalypso.IndexJoin"),
    ],
    ids=[
        "right-column",
        "no-bound",
        "k-zero",
        "k-negative",
        "k-float",
        "k-string",
        "k-bool",
        "distance-negative",
        "distance-nan",
        "distance-string",
        "accept-string",
        "reject-inf",
        "reversed-cascade",
        "empty-query",
        "malformed-query",
        "query-none",
        "right-column-none",
        "not-an-index",
    ],
)
def test_bad_index_join(index: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        base().sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?", index=index)


def test_index_join_thresholds_belong_to_the_index() -> None:
    with pytest.raises(PlanError, match="give the cascade thresholds as index=IndexJoin"):
        base().sem_join(HYPOTHESES, "Does {text} entail {hypothesis}?", thresholds=None)


def test_index_join_over_a_right_column_with_a_missing_value() -> None:
    right = pd.DataFrame({"hypothesis": ["it is secret", None]})
    with pytest.raises(PlanError, match=r"column 'hypothesis', row 'right row 1': missing value"):
        base().sem_join(
            right, "Does {text} entail {hypothesis}?", index=IndexJoin("{text}", "hypothesis")
        )


# --------------------------------------------------------------------------- tables


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "a table is a pandas DataFrame or a list of dicts, got list"),
        ("text", "a table is a pandas DataFrame or a list of dicts, got str"),
        ([{"a": 1}, ["b"]], "a pandas DataFrame or a list of dicts"),
        (None, "got NoneType"),
        (42, "got int"),
        ({"text": ["a", "b"]}, "got dict"),
        (pd.Series(["a", "b"]), "got Series"),
        (pd.DataFrame({0: ["x"]}), r"column names must be strings, got \[0\]"),
        (pd.DataFrame({("a", "b"): ["x"]}), "column names must be strings"),
        pytest.param(
            pd.DataFrame([["a", "b"]], columns=["text", "text"]),
            r"duplicate column names \['text'\]",
            marks=ISSUE_9,
        ),
        (pd.DataFrame({"": ["x"]}), "column name '' must be a non-empty name on one line"),
        (pd.DataFrame({"te\nxt": ["x"]}), r"column name 'te\\nxt' must be a non-empty name"),
        ([{"bad \ud800": "x"}], r"row 0: column name 'bad \\ud800': the text is not valid"),
        pytest.param(
            [{"text": "ok"}, {"text": "bad \ud800"}],
            r"^column 'text', row 1: the text is not valid Unicode",
            marks=ISSUE_9,
        ),
        (
            lambda: pd.DataFrame({"t": ["x"]}).set_axis(
                pd.Index(["bad \ud800"], dtype=object), axis=1
            ),
            "column name 'bad \\\\ud800': the text is not valid Unicode",
        ),
    ],
    ids=[
        "list-of-ints",
        "string",
        "mixed-list",
        "none",
        "int",
        "dict-of-lists",
        "series",
        "int-column-name",
        "tuple-column-name",
        "duplicate-columns",
        "empty-column-name",
        "multi-line-column-name",
        "surrogate-column-name-in-records",
        "surrogate-value-in-records",
        "surrogate-column-name",
    ],
)
def test_bad_table_input(data: Any, message: str) -> None:
    if callable(data):
        data = data()
    with pytest.raises(PlanError, match=message):
        kalypso.table(data)


@pytest.mark.parametrize("name", ["", None, 5])
def test_bad_table_name(name: Any) -> None:
    with pytest.raises(PlanError, match="a table name is a non-empty string"):
        kalypso.table(docs(), name=name)


# --------------------------------------------------------------------------- run options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policy": "eager"}, "unknown execution policy 'eager'"),
        ({"policy": "Pipelined"}, "unknown execution policy 'Pipelined'"),
        ({"policy": ""}, "a policy is a name from"),
        ({"policy": 3}, "a policy is a name from"),
        ({"policy": "static:1.5"}, r"the static fraction must be in \(0, 1\)"),
        ({"policy": "adaptive:2"}, "takes no argument"),
        ({"pinning": "pinned"}, "pinning must be 'virtual' or 'explicit'"),
        ({"pinning": None}, "pinning must be 'virtual' or 'explicit'"),
        (
            {"policy": "operator-at-a-time", "pinning": "explicit"},
            "pinning='explicit' needs a policy that reserves KV memory; 'operator-at-a-time'",
        ),
        ({"max_tasks_in_flight": 0}, "max_tasks_in_flight must be an integer >= 1, got 0"),
        ({"max_tasks_in_flight": 2.5}, "max_tasks_in_flight must be an integer >= 1"),
        ({"max_tasks_in_flight": True}, "max_tasks_in_flight must be an integer >= 1"),
        ({"kv_overcommit": 0.5}, r"kv_overcommit must be in \[1.0, 4.0\], got 0.5"),
        ({"kv_overcommit": 5}, r"kv_overcommit must be in \[1.0, 4.0\], got 5"),
        ({"kv_overcommit": math.nan}, "kv_overcommit must be a finite number, got nan"),
        ({"kv_overcommit": "2"}, "kv_overcommit must be a finite number, got '2'"),
        (
            {"kv_overcommit": 1.5, "pinning": "explicit"},
            "kv_overcommit=1.5 with pinning='explicit'",
        ),
        (
            {"kv_overcommit": 1.5, "ledger": KVLedger(64, fair_share=True)},
            r"kv_overcommit=1.5 with a fair-sharing ledger: it shares the engine's 64 blocks",
        ),
        ({"max_continuations": -1}, "max_continuations must be an integer >= 0, got -1"),
        pytest.param(
            {"max_continuations": "2"},
            "max_continuations must be an integer >= 0, got '2'",
            marks=ISSUE_9,
        ),
        pytest.param({"max_retries": "2"}, "max_retries is now max_continuations", marks=ISSUE_9),
        ({"max_continuations": None}, "max_continuations must be an integer"),
        ({"alpha": 0}, "alpha must be > 0"),
        ({"alpha": "1"}, "alpha must be a finite number, got '1'"),
        ({"alpha": 0.5, "beta": 0.5}, "need 0 < beta < alpha"),
        ({"beta": -1.0}, "beta must be > 0"),
        ({"alpha": math.inf}, "alpha must be a finite number, got inf"),
        ({"near_tie_margin": -0.1}, "near_tie_margin must be >= 0"),
        ({"near_tie_margin": math.nan}, "near_tie_margin must be a finite number, got nan"),
        ({"estimate_bounds": "yes"}, "estimate_bounds must be True or False"),
        ({"progress": 1}, "progress must be True or False"),
        ({"fixed_bound_tokens": 0}, "fixed_bound_tokens must be an integer >= 1"),
        ({"fixed_bound_tokens": "8"}, "fixed_bound_tokens must be an integer >= 1"),
        ({"call_timeout_s": 0}, "call_timeout_s must be > 0"),
        ({"call_timeout_s": "10"}, "call_timeout_s must be a finite number"),
        ({"deadlock_check_s": None}, "deadlock_check_s must be a finite number"),
        pytest.param({"system_prompt": None}, "system_prompt must be a string", marks=ISSUE_9),
        ({"system_prompt": 5}, "system_prompt must be a string"),
        ({"system_prompt": "Be careful \ud800"}, "system_prompt: the text is not valid Unicode"),
        ({"query_id": ""}, "query_id must be a non-empty string"),
        ({"query_id": 7}, "query_id must be a non-empty string"),
        ({"turbo": True}, "arun: .*unexpected keyword argument 'turbo'"),
        ({"options": RunOptions(), "policy": "adaptive"}, "pass either options= or keyword"),
        ({"options": {"policy": "adaptive"}}, "options must be a RunOptions"),
        ({"ledger": 64}, "ledger must be a KVLedger, got 64"),
        ({"layout": "chatml"}, "layout must be a ChatLayout"),
        ({"layout": ChatLayout(WordTokenizer())}, "layout must be a ChatLayout of the engine's"),
    ],
    ids=lambda value: None if isinstance(value, str) else ascii(value)[:40],
)
async def test_bad_run_options(
    make_engine: EngineFactory, options: dict[str, Any], message: str
) -> None:
    engine = make_engine()
    await refused(engine, base().sem_filter("Is {text} ok?"), message, **options)


def test_bad_run_options_are_refused_by_run_options_themselves() -> None:
    with pytest.raises(PlanError, match="pinning must be"):
        RunOptions(pinning="always")
    # the workflow baselines reserve nothing either
    with pytest.raises(PlanError, match="'all-ready' reserves none"):
        RunOptions(policy="all-ready", pinning="explicit")


@pytest.mark.parametrize(
    "engine",
    [pytest.param(None, marks=ISSUE_9), "sim", SimEngine, object()],
    ids=["none", "string", "class", "object"],
)
async def test_arun_needs_an_engine(engine: Any) -> None:
    with pytest.raises(PlanError, match=r"arun needs an engine \(kalypso.engine.protocol.Engine\)"):
        await base().sem_filter("Is {text} ok?").arun(engine)


@ISSUE_9
async def test_run_inside_a_running_event_loop_is_refused(make_engine: EngineFactory) -> None:
    engine = make_engine()
    with pytest.raises(PlanError, match=r"Table.run\(\) was called inside a running event loop"):
        base().sem_filter("Is {text} ok?").run(engine)
    await assert_untouched(engine)


async def test_explicit_pinning_on_an_engine_without_pins(make_engine: EngineFactory) -> None:
    class NoPins(CountingSim):
        @property
        def supports_pinning(self) -> bool:
            return False

    engine = NoPins(num_blocks=64, block_size_tokens=16)
    try:
        await refused(
            engine, base().sem_filter("Is {text} ok?"), "explicit pinning", pinning="explicit"
        )
    finally:
        await engine.close()


@ISSUE_9
async def test_two_queries_with_one_id_on_one_ledger(make_engine: EngineFactory) -> None:
    """They would release each other's blocks: the second is refused before any call."""
    engine = make_engine()
    ledger = KVLedger(engine.capacity.num_blocks)
    ledger.register("nightly")  # a run with this id is going on
    await refused(
        engine,
        base().sem_filter("Is {text} ok?"),
        "a query with id 'nightly' is already running on this engine",
        ledger=ledger,
        query_id="nightly",
    )
    ledger.unregister("nightly")
    assert (
        len(
            (
                await base()
                .sem_filter("Is {text} ok?")
                .arun(engine, ledger=ledger, query_id="nightly")
            ).frame
        )
        == 3
    )


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("frame", "column", "row"),
    [
        (pd.DataFrame({"text": ["a", None, "c"]}), "text", 1),
        (pd.DataFrame({"text": ["a", "b", float("nan")]}), "text", 2),
        (pd.DataFrame({"text": ["a", "b", "c"], "score": [1.0, math.nan, 3.0]}), "score", 1),
        (pd.DataFrame({"text": ["a", "b", "c"], "score": [1, None, 3]}), "score", 1),
        (pd.DataFrame({"text": [None, "b", "c"]}).astype("string"), "text", 0),
        (pd.DataFrame({"text": ["a", "b", "c"], "when": [pd.NaT, pd.NaT, pd.NaT]}), "when", 0),
    ],
    ids=["none", "nan-in-text", "nan-float", "none-in-int-column", "pd-NA", "NaT"],
)
@ISSUE_9
async def test_missing_values_are_rejected_naming_operator_row_and_column(
    make_engine: EngineFactory, frame: pd.DataFrame, column: str, row: int
) -> None:
    """The README promises it: the error names the operator, the row and the column."""
    plan = kalypso.table(frame).sem_filter("Is {text} ok?").sem_map(f"Explain {{{column}}}.", "e")
    op = "1:sem_filter" if column == "text" else "2:sem_map"
    await refused(
        make_engine(),
        plan,
        rf"^\[{op}\] column '{column}', row {row}: missing value \(None/NaN\)",
    )


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
    await refused(
        make_engine(),
        plan,
        r"^\[4:sem_map\] column 'notes', row 2: missing value",
        policy="operator-at-a-time",
    )


async def test_missing_value_in_the_right_table_fails_before_any_call(
    make_engine: EngineFactory,
) -> None:
    right = pd.DataFrame({"hypothesis": ["it is secret", None]})
    plan = (
        base()
        .sem_filter("Is {text} a contract?")
        .sem_join(right, "Does {text} entail {hypothesis}?")
    )
    await refused(make_engine(), plan, r"^\[3:sem_join\] column 'hypothesis', row 'right row 1'")


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
    await refused(make_engine(), plan, rf"^\[2:{blocking}\] column 'notes', row 1")


async def test_missing_value_in_an_index_search_query_fails_before_any_call(
    make_engine: EngineFactory,
) -> None:
    frame = pd.DataFrame({"claim": ["a", "b"], "query": ["q", None]})
    plan = (
        kalypso.table(frame)
        .index_search(["p1", "p2"], "{query}", k=1)
        .sem_filter("Is the {claim} supported by the {evidence}?")
    )
    await refused(make_engine(), plan, r"^\[1:index_search\] column 'query', row 1: missing")


async def test_unreferenced_columns_are_not_checked(make_engine: EngineFactory) -> None:
    """Only values that enter a prompt must become text: a set or a None in a column no
    instruction names is carried through untouched."""
    frame = pd.DataFrame({"text": ["a", "b"], "tags": [{"x"}, None]})
    result = await kalypso.table(frame).sem_filter("Is {text} ok?").arun(make_engine())
    assert list(result.frame["tags"]) == [{"x"}, None]


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


def _self_containing() -> list[Any]:
    value: list[Any] = ["a"]
    value.append(value)
    return value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "bad \ud800 text",
            r"not valid Unicode \(a lone surrogate '\\ud800' at position 4\)",
            marks=ISSUE_9,
        ),
        (["ok", "bad \udc80"], "not valid Unicode"),
        ({"a"}, "values of type set cannot be put in a prompt"),
        (b"bytes", "values of type bytes cannot be put in a prompt"),
        (object(), "values of type object cannot be put in a prompt"),
        (complex(1, 2), "values of type complex cannot be put in a prompt"),
        (["a", None], "missing value"),
        ({(1, 2): "tuple key"}, "a dict that cannot be written as JSON"),
        ({1: "a", "b": 2}, "a dict that cannot be written as JSON"),
        (_self_containing(), "a list nested more than 32 deep"),
        (pd.NA, "missing value"),
        (np.float32("nan"), "missing value"),
    ],
    ids=[
        "surrogate",
        "surrogate-in-list",
        "set",
        "bytes",
        "object",
        "complex",
        "none-in-list",
        "tuple-key",
        "mixed-keys",
        "self-containing",
        "pd-NA",
        "np-nan",
    ],
)
async def test_values_that_cannot_enter_a_prompt(
    make_engine: EngineFactory, value: Any, message: str
) -> None:
    frame = pd.DataFrame({"text": ["a", "b"], "v": pd.Series(["fine", value], dtype=object)})
    plan = kalypso.table(frame).sem_map("Describe the {v} of {text}.", "d")
    await refused(make_engine(), plan, rf"^\[1:sem_map\] column 'v', row 1: .*{message}")


async def test_a_lone_surrogate_in_the_right_table(make_engine: EngineFactory) -> None:
    right = pd.DataFrame({"hypothesis": pd.Series(["fine", "bad \ud800"], dtype=object)})
    plan = base().sem_join(right, "Does {text} entail {hypothesis}?")
    await refused(make_engine(), plan, r"^\[2:sem_join\] column 'hypothesis', row 'right row 1'")


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
        (np.array(["A1", "A2"]), "A1; A2"),
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
        "np-array",
    ],
)
def test_value_to_text_rule(value: Any, text: str) -> None:
    assert value_to_text(value, "v") == text
    assert Instruction.parse("<{v}>", operator="t").render({"v": value}) == f"<{text}>"
    tokenizer = WordTokenizer()
    layout = ChatLayout(tokenizer)
    piece = piece_ids(Instance((0,), {"v": value}), "v", layout)
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


async def test_unsupported_value_type_in_a_source_row(make_engine: EngineFactory) -> None:
    frame = pd.DataFrame({"text": ["a", "b"], "tags": [{"x"}, {"y"}]})
    await refused(
        make_engine(),
        kalypso.table(frame).sem_map("Describe {tags}.", "d"),
        r"^\[1:sem_map\] column 'tags', row 0: values of type set",
    )


async def test_converted_values_reach_the_prompt(make_engine: EngineFactory) -> None:
    """ints, lists and dicts are accepted and appear in the prompt as the rule renders them."""
    frame = pd.DataFrame({"n": [3], "tags": [["red", "blue"]], "meta": [{"k": 1}]})
    engine = make_engine()
    await kalypso.table(frame).sem_map("Describe {n} {tags} {meta}.", "d").arun(engine)
    [request] = engine.requests
    prompt = engine.tokenizer.decode(request.prompt_token_ids)
    assert '[n]\n3\n\n[tags]\nred; blue\n\n[meta]\n{"k": 1}\n\n' in prompt
    assert prompt.endswith("Describe n tags meta.<|im_end|>\n<|im_start|>assistant\n")


# --------------------------------------------------------------------------- decisions


class YesPlease(LLMOperator):
    """A custom decision whose choices start with the same word."""

    kind = "yes_please"
    contract: ClassVar[OperatorContract] = OperatorContract(True, True, False)
    choices = ("yes please", "yes thanks")

    def __init__(self) -> None:
        self.instruction = Instruction.parse("Is the {text} polite?", operator=self.kind)
        self.task = "Is it polite?"

    def output_schema(self, schema: Schema) -> Schema:
        return schema

    def describe(self) -> str:
        return "yes_please"

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        return {}


async def test_decision_choices_one_token_cannot_tell_apart(make_engine: EngineFactory) -> None:
    await refused(
        make_engine(),
        base().apply(YesPlease()),
        r"\[1:yes_please\] choices 'yes please' and 'yes thanks' start with the same token",
    )


# --------------------------------------------------------------------------- sizes


LONG_TEXT = " ".join(["word"] * 200)


@pytest.mark.parametrize("policy", ["adaptive", "operator-at-a-time"])
async def test_prompt_longer_than_the_context_names_the_row(
    make_engine: EngineFactory, policy: str
) -> None:
    frame = pd.DataFrame({"text": ["short", "also short", LONG_TEXT, "short"]})
    plan = kalypso.table(frame).sem_filter("Is the {text} ok?").sem_map("Sum {text}.", "s")
    await refused(
        make_engine(max_model_len_tokens=128),
        plan,
        r"^\[1:sem_filter\] row 2: a prompt of up to \d+ tokens \(longest column 'text'\) plus"
        r" 1 output tokens exceeds the model context of 128 tokens$",
        policy=policy,
    )


async def test_prompt_size_check_counts_the_output_bound(make_engine: EngineFactory) -> None:
    """A prompt that fits alone but not with the operator's max_tokens is rejected too."""
    frame = pd.DataFrame({"text": ["a few words of text"]})
    plan = kalypso.table(frame).sem_map("Sum {text}.", "s", max_tokens=64)
    probe = make_engine()
    await plan.arun(probe)
    prompt_tokens = len(probe.requests[0].prompt_token_ids)

    await refused(
        make_engine(max_model_len_tokens=prompt_tokens + 63),
        plan,
        rf"row 0: a prompt of up to {prompt_tokens} tokens \(longest column 'text'\) plus 64",
    )
    fits = make_engine(max_model_len_tokens=prompt_tokens + 64)
    assert len((await plan.arun(fits)).frame) == 1


async def test_prompt_size_check_uses_the_hard_cap_not_the_first_bound(
    make_engine: EngineFactory,
) -> None:
    """sem_map may be continued up to its cap (default 256), so the cap must fit the
    context even though the first request asks for a smaller bound."""
    frame = pd.DataFrame({"text": ["a few words of text"]})
    plan = kalypso.table(frame).sem_map("Sum {text}.", "s")  # first bound 64, cap 256
    probe = make_engine()
    await plan.arun(probe, reserve_cap_when_it_fits=False)  # the run starts at the bound
    [first_call] = probe.requests
    assert first_call.max_tokens == 64
    prompt_tokens = len(first_call.prompt_token_ids)

    await refused(
        make_engine(max_model_len_tokens=prompt_tokens + 128),
        plan,
        rf"row 0: a prompt of up to {prompt_tokens} tokens .* plus 256 output",
    )


@ISSUE_9
async def test_a_right_table_document_longer_than_the_context(make_engine: EngineFactory) -> None:
    right = pd.DataFrame({"hypothesis": ["short", LONG_TEXT]})
    plan = base().sem_filter("Is {text} ok?").sem_join(right, "Does {text} say {hypothesis}?")
    await refused(
        make_engine(max_model_len_tokens=200),
        plan,
        r"^\[3:sem_join\] right row 1: a prompt of up to \d+ tokens \(longest column"
        r" 'hypothesis'\) .* exceeds the model context of 200 tokens",
    )


@ISSUE_9
async def test_a_join_prompt_of_two_documents_that_fit_alone(make_engine: EngineFactory) -> None:
    """Each side fits the context, the pair does not: the longest left and right values
    can meet in one join prompt."""
    half = " ".join(["word"] * 90)
    left = kalypso.table(pd.DataFrame({"text": ["short", half]}))
    right = pd.DataFrame({"hypothesis": [half, "short"]})
    plan = left.sem_filter("Is {text} ok?").sem_join(right, "Does {text} say {hypothesis}?")
    await refused(
        make_engine(max_model_len_tokens=200),
        plan,
        r"^\[3:sem_join\] .*exceeds the model context of 200 tokens",
    )


@ISSUE_9
async def test_a_prompt_larger_than_the_kv_pool(make_engine: EngineFactory) -> None:
    frame = pd.DataFrame({"text": ["short", " ".join(["w"] * 300)]})
    plan = kalypso.table(frame).sem_filter("Is {text} ok?")
    await refused(
        make_engine(num_blocks=8, max_model_len_tokens=4096),
        plan,
        r"^\[1:sem_filter\] row 1: .* exceeds the KV cache of 128 tokens",
    )


async def test_a_generated_column_that_cannot_fit_a_later_prompt(
    make_engine: EngineFactory,
) -> None:
    """A column an earlier call generates is counted at its cap."""
    plan = base().sem_map("Sum {text}.", "s", max_tokens=130).sem_filter("Is {s} ok?")
    await refused(
        make_engine(max_model_len_tokens=200),
        plan,
        r"^\[2:sem_filter\] generated text: .*longest column 's'.* exceeds the model context",
    )


async def test_a_prompt_after_a_barrier_that_cannot_fit(make_engine: EngineFactory) -> None:
    """Pipelines after a blocking operator are checked too (their rows carry the same
    values)."""
    frame = pd.DataFrame({"text": ["short", "short"], "body": ["b", LONG_TEXT]})
    plan = (
        kalypso.table(frame)
        .sem_topk("Rank the {text}.", k=2)
        .sem_map("Summarize the {body}.", "s", max_tokens=16)
    )
    await refused(
        make_engine(max_model_len_tokens=200),
        plan,
        r"^\[2:sem_map\] row 1: .*longest column 'body'",
    )


async def test_a_sem_topk_scoring_prompt_that_cannot_fit(make_engine: EngineFactory) -> None:
    frame = pd.DataFrame({"text": ["short", LONG_TEXT]})
    await refused(
        make_engine(max_model_len_tokens=200),
        kalypso.table(frame).sem_topk("Rank the {text}.", k=1),
        r"^\[1:sem_topk\] row 1: .* exceeds the model context of 200 tokens",
    )


@ISSUE_9
async def test_a_sem_agg_item_that_cannot_fit_one_call(make_engine: EngineFactory) -> None:
    """An item is never truncated (issue 9: a document without a word was): one that
    cannot fit one call alone is refused before any call, naming it. (The simulator's
    tokenizer makes every punctuation mark a token: a document without a word.)"""
    frame = pd.DataFrame({"text": ["fine", "!" * 1200]})
    await refused(
        make_engine(max_model_len_tokens=1024),
        kalypso.table(frame).sem_agg("Summarize every {text}.", max_tokens=64),
        r"^\[1:sem_agg\] sem_agg: item 1 has \d+ tokens, more than the 704 one call can carry",
    )


async def test_a_sem_agg_over_generated_items_that_cannot_fit(make_engine: EngineFactory) -> None:
    plan = base().sem_map("Sum {text}.", "s", max_tokens=800).sem_agg("Summarize every {s}.")
    await refused(
        make_engine(max_model_len_tokens=1024),
        plan,
        r"^\[2:sem_agg\] sem_agg: an item can have \d+ tokens",
    )


async def test_a_sem_agg_cap_that_leaves_no_room_to_fold(make_engine: EngineFactory) -> None:
    await refused(
        make_engine(max_model_len_tokens=1024),
        base().sem_agg("Summarize every {text}.", max_tokens=400),
        r"^\[1:sem_agg\] sem_agg: max_tokens=400 leaves no room to fold two partial answers",
    )


# --------------------------------------------------------------------------- counting


def test_at_least_150_malformed_plans_are_tried(request: pytest.FixtureRequest) -> None:
    """Every case of this module (but the few that check accepted input) is a malformed
    plan refused before any LLM call; the issue-9 inputs are among them."""
    items = request.session.items
    mine = [i for i in items if i.module is request.module]
    accepted = {
        "test_sem_classify_strips_labels",
        "test_value_to_text_rule",
        "test_render_unescapes_literal_braces",
        "test_converted_values_reach_the_prompt",
        "test_unreferenced_columns_are_not_checked",
        "test_rows_removed_by_a_python_filter_are_not_checked",
        "test_at_least_150_malformed_plans_are_tried",
    }
    malformed = [i for i in mine if i.originalname not in accepted]  # type: ignore[attr-defined]
    issue_9 = [i for i in malformed if i.get_closest_marker("issue_9") is not None]
    if len(mine) < 100:  # a subset of the module was selected
        pytest.skip("run the whole module to count its cases")
    assert len(malformed) >= 150
    assert len(issue_9) >= 25
