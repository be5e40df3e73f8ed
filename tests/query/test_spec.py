"""Table plans as JSON specs (kalypso.query.spec): random plans round-trip exactly (the
same explain(), task graphs and spec), malformed specs are refused naming the field,
plans that cannot travel are refused naming the operator, and Parquet sources round-trip.
All on the simulated engine (lowering only, plus one run)."""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import kalypso
from kalypso.core.functions import register_function
from kalypso.engine.sim import SimEngine
from kalypso.query import (
    CartesianProduct,
    IndexJoin,
    OperatorContract,
    PlanError,
    RowOperator,
    SemFilter,
    Table,
    TableSpec,
    table_from_spec,
)
from kalypso.query.operators import Schema, Values
from kalypso.query.spec_source import SourceFormat


def text_length(row: dict[str, Any]) -> int:
    return len(str(row.get("text", "")))


def always_one(row: dict[str, Any]) -> int:
    return 1


def keep_all(row: dict[str, Any]) -> bool:
    return True


def has_long_text(row: dict[str, Any]) -> bool:
    return len(str(row.get("text", ""))) > 12


MAPS = {"test_spec.text_length": text_length, "test_spec.always_one": always_one}
FILTERS = {"test_spec.keep_all": keep_all, "test_spec.has_long_text": has_long_text}
for _name, _function in {**MAPS, **FILTERS}.items():
    register_function(_name, _function)


@pytest.fixture(scope="module")
def engine() -> SimEngine:
    """For lowering only (its tokenizer): nothing runs on it, so nothing to close."""
    return SimEngine(num_blocks=256, block_size_tokens=16)


def round_trip(plan: Table, source_format: SourceFormat = "rows") -> tuple[TableSpec, Table]:
    spec = plan.to_spec(source_format=source_format)
    return spec, table_from_spec(json.loads(spec.model_dump_json()))


def assert_same_plan(
    plan: Table,
    again: Table,
    spec: TableSpec,
    engine: SimEngine,
    source_format: SourceFormat = "rows",
) -> None:
    assert again.explain() == plan.explain()
    assert again.to_spec(source_format=source_format) == spec
    assert [g.explain() for g in again.task_graphs(engine)] == [
        g.explain() for g in plan.task_graphs(engine)
    ]


# --------------------------------------------------------------------------- random plans

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
WORDS = ["Does", "the", "say", "about", "{{literal}}", "battery", "why"]
LABELS = ["yes", "no", "maybe", "positive", "negative", "neutral"]
OPERATOR_NAMES = ["sem_filter", "sem_map", "sem_extract", "sem_classify", "sem_join"]
OPERATOR_NAMES += ["index_search", "sem_topk", "sem_agg", "map", "filter"]


@st.composite
def source_tables(draw: st.DrawFn) -> tuple[pd.DataFrame, str]:
    columns = draw(
        st.lists(
            st.sampled_from(["text", "title", "body", "n", "count"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    rows = draw(st.integers(1, 4))
    data: dict[str, list[Any]] = {}
    for column in columns:
        values = TEXT if draw(st.booleans()) else st.integers(-(10**6), 10**6)
        data[column] = draw(st.lists(st.one_of(values, st.none()), min_size=rows, max_size=rows))
    name = draw(st.text(alphabet=string.ascii_letters + " _-", min_size=1, max_size=8))
    return pd.DataFrame(data), name


def instruction(draw: st.DrawFn, schema: tuple[str, ...]) -> str:
    columns = draw(st.lists(st.sampled_from(schema), min_size=1, max_size=2, unique=True))
    words = draw(st.lists(st.sampled_from(WORDS), max_size=3))
    return " ".join([*words, *(f"{{{c}}}" for c in columns)]) + "?"


@st.composite
def plans(draw: st.DrawFn) -> Table:
    frame, name = draw(source_tables())
    plan = kalypso.table(frame, name=name)
    fresh = iter(f"c{i}" for i in range(1000))
    for kind in draw(st.lists(st.sampled_from(OPERATOR_NAMES), min_size=1, max_size=6)):
        schema = plan.columns
        if kind == "sem_filter":
            text, negate = instruction(draw, schema), draw(st.booleans())
            plan = (
                plan.op("sem_filter", text, negate=negate)
                if draw(st.booleans())
                else plan.sem_filter(text, negate=negate)
            )
        elif kind in ("sem_map", "sem_extract"):
            target: Any = next(fresh) if kind == "sem_map" else [next(fresh), next(fresh)]
            tokens = {
                "max_tokens": draw(st.integers(1, 300)),
                "first_bound_tokens": draw(st.integers(1, 100)),
            }
            builder = plan.sem_map if kind == "sem_map" else plan.sem_extract
            plan = builder(instruction(draw, schema), target, **tokens)
        elif kind == "sem_classify":
            labels = draw(st.lists(st.sampled_from(LABELS), min_size=2, max_size=4, unique=True))
            plan = plan.sem_classify(instruction(draw, schema), labels, next(fresh))
        elif kind == "sem_join":
            plan = draw_join(draw, plan, fresh)
        elif kind == "index_search":
            corpus = draw(st.lists(TEXT, min_size=1, max_size=3))
            k = draw(st.integers(1, 3))
            plan = plan.index_search(corpus, instruction(draw, schema), k, next(fresh))
        elif kind == "sem_topk" and "topk_score" not in schema:
            plan = plan.sem_topk(instruction(draw, schema), draw(st.integers(1, 5)))
        elif kind == "sem_agg":
            max_tokens = draw(st.integers(1, 200))
            plan = plan.sem_agg(instruction(draw, schema), next(fresh), max_tokens=max_tokens)
        elif kind == "map":
            plan = plan.map(MAPS[draw(st.sampled_from(sorted(MAPS)))], next(fresh))
        elif kind == "filter":
            plan = plan.filter(FILTERS[draw(st.sampled_from(sorted(FILTERS)))])
    return plan


def draw_join(draw: st.DrawFn, plan: Table, fresh: Iterator[str]) -> Table:
    """A join with a right table whose columns are new, or one left name to be renamed."""
    schema = plan.columns
    rows = draw(st.integers(1, 3))
    clashing = [c for c in schema if f"{c}_right" not in schema]
    names = [next(fresh)] if not clashing or draw(st.booleans()) else []
    if clashing and (not names or draw(st.booleans())):
        names.append(draw(st.sampled_from(clashing)))
    right = pd.DataFrame(
        {
            n: draw(
                st.lists(st.text(string.ascii_lowercase, min_size=1), min_size=rows, max_size=rows)
            )
            for n in names
        }
    )
    renamed = [f"{n}_right" if n in schema else n for n in names]
    text = "Do " + instruction(draw, schema) + " and {" + draw(st.sampled_from(renamed)) + "} match"
    index = None
    if "join_distance" not in schema and draw(st.booleans()):
        distance = st.one_of(st.none(), st.integers(0, 2), st.floats(0, 2))
        k = draw(st.one_of(st.none(), st.integers(1, 3)))
        limits = sorted(draw(st.lists(st.floats(0, 2), min_size=2, max_size=2)))
        index = IndexJoin(
            left=instruction(draw, schema),
            right_column=draw(st.sampled_from(names)),
            k=k,
            max_distance=draw(distance if k is not None else st.floats(0, 2)),
            accept_below=draw(st.sampled_from([None, limits[0]])),
            reject_above=draw(st.sampled_from([None, limits[1]])),
        )
    right_side = kalypso.table(right, name=draw(st.sampled_from(["right", "hotels"])))
    return plan.sem_join(right_side, text, index=index, negate=draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(plan=plans(), source_format=st.sampled_from(["rows", "parquet"]))
def test_random_plans_round_trip_exactly(
    plan: Table, source_format: SourceFormat, engine: SimEngine
) -> None:
    spec, again = round_trip(plan, source_format)
    assert_same_plan(plan, again, spec, engine, source_format)
    assert TableSpec.model_validate_json(spec.model_dump_json()) == spec


def test_a_round_tripped_plan_gives_the_same_answers_on_the_simulator() -> None:
    frame = pd.DataFrame(
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
    aspects = kalypso.table(pd.DataFrame({"aspect": ["battery", "screen"]}), name="aspects")
    plan = (
        kalypso.table(frame, name="reviews")
        .sem_filter("Does the {text} describe a problem?")
        .map(text_length, "length")
        .filter(has_long_text)
        .sem_classify("Is the {text} positive?", ["positive", "negative"], "tone")
        .sem_join(aspects, "Is the {text} about the {aspect}?")
        .sem_map("Summarize the {text}.", "summary", max_tokens=32)
        .sem_topk("How specific is the {summary}?", 2)
    )
    spec, again = round_trip(plan)
    engine = SimEngine(num_blocks=256, block_size_tokens=16)
    assert_same_plan(plan, again, spec, engine)
    expected = plan.run(engine)
    got = again.run(SimEngine(num_blocks=256, block_size_tokens=16))
    assert len(expected.frame) == 2
    pd.testing.assert_frame_equal(got.frame, expected.frame)
    assert got.llm_calls == expected.llm_calls > 0


# --------------------------------------------------------------------------- Parquet sources


def test_a_parquet_source_round_trips_with_its_dtypes(engine: SimEngine) -> None:
    frame = pd.DataFrame(
        {
            "text": ["a", "b", None],
            "n": [1, 2, 3],
            "score": [0.5, float("nan"), 2.0],
            "flag": [True, False, True],
            "seen": pd.to_datetime(["2024-01-01", "2024-02-01", "2024-03-01"]),
        }
    )
    right = pd.DataFrame({"label": ["x", "y"], "weight": [1.5, 2.5]})
    plan = kalypso.table(frame, name="docs").sem_join(right, "Is {text} like {label}?")
    with pytest.raises(PlanError, match=r"column 'seen', row 0.*source_format='parquet'"):
        plan.to_spec()
    spec, again = round_trip(plan, "parquet")
    assert spec.source.rows is None and spec.source.parquet_b64 is not None
    assert_same_plan(plan, again, spec, engine, "parquet")
    pd.testing.assert_frame_equal(again.source, plan.source)


def test_a_table_without_rows_travels_as_parquet_only() -> None:
    empty = kalypso.table(pd.DataFrame({"text": pd.Series([], dtype=str)}), name="none")
    with pytest.raises(PlanError, match=r"without rows.*parquet"):
        empty.to_spec()
    spec, again = round_trip(empty.sem_filter("Is {text} ok?"), "parquet")
    assert again.columns == ("text",) and len(again.source) == 0
    assert again.to_spec(source_format="parquet") == spec


# --------------------------------------------------------------------------- refused plans


class Shout(RowOperator):
    kind = "shout"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def output_schema(self, schema: Schema) -> Schema:
        return schema

    def describe(self) -> str:
        return "shout"

    def apply_row(self, values: Values) -> Values | None:
        return values


class MySemFilter(SemFilter):
    """A subclass of a built-in may behave differently: it does not travel as one."""


def docs() -> Table:
    return kalypso.table([{"text": "a"}, {"text": "b"}], name="docs")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda t: t.apply(Shout()), r"operator 1:shout \(Shout\).*built-in operators"),
        (lambda t: t.map(lambda r: 1, "one"), r"1:map.*'<lambda>'.*register_function"),
        (lambda t: t.filter(str.isupper), r"1:filter.*'isupper'.*register_function"),
        (lambda t: t.apply(MySemFilter("Is {text} ok?")), r"1:sem_filter \(MySemFilter\)"),
        (lambda t: t.apply(CartesianProduct(pd.DataFrame({"x": [1]}))), r"1:cartesian.*sem_join"),
    ],
    ids=["custom operator", "lambda", "unregistered function", "subclass", "product alone"],
)
def test_plans_that_cannot_travel_are_refused_naming_the_operator(
    build: Callable[[Table], Table], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        build(docs()).to_spec()


def test_an_unknown_source_format_is_refused() -> None:
    with pytest.raises(PlanError, match="source_format"):
        docs().to_spec(source_format="csv")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- malformed specs


def base_spec() -> dict[str, Any]:
    return {
        "kind": "table",
        "version": 1,
        "name": "docs",
        "source": {"rows": [{"text": "a", "n": 1}, {"text": "b", "n": 2}]},
        "operators": [],
    }


def with_op(**op: Any) -> Callable[[dict[str, Any]], None]:
    def patch(spec: dict[str, Any]) -> None:
        spec["operators"] = [op]

    return patch


def setting(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def patch(spec: dict[str, Any]) -> None:
        target = spec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return patch


def dropping(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.pop(key)


NOT_PARQUET = base64.b64encode(b"PAR1 this is not a parquet file").decode()
PARQUET = kalypso.table([{"text": "a"}]).to_spec(source_format="parquet").source.parquet_b64
JOIN = {"op": "sem_join", "instruction": "Is {text} like {x}?"}
RIGHT = {"source": {"rows": [{"x": "y"}]}}

MALFORMED: list[tuple[str, Callable[[dict[str, Any]], None], tuple[Any, ...], str]] = [
    ("missing name", dropping("name"), ("name",), "Field required"),
    ("name not a string", setting("name", value=5), ("name",), "valid string"),
    ("unknown field", setting("owner", value="me"), ("owner",), "Extra inputs"),
    ("wrong kind", setting("kind", value="workflow"), ("kind",), "'table'"),
    ("future version", setting("version", value=2), ("version",), "1"),
    ("operators not a list", setting("operators", value={}), ("operators",), "valid list"),
    ("unknown op", with_op(op="sem_explode"), ("operators", 0), "sem_explode"),
    ("no op", with_op(instruction="Is {text} ok?"), ("operators", 0), "'op'"),
    (
        "missing instruction",
        with_op(op="sem_filter"),
        ("operators", 0, "sem_filter", "instruction"),
        "required",
    ),
    (
        "empty instruction",
        with_op(op="sem_filter", instruction=""),
        ("operators", 0, "sem_filter", "instruction"),
        "at least 1",
    ),
    (
        "negate not a bool",
        with_op(op="sem_filter", instruction="Is {text} ok?", negate="yes"),
        ("operators", 0, "sem_filter", "negate"),
        "valid boolean",
    ),
    (
        "negative k",
        with_op(op="sem_topk", instruction="Best {text}?", k=-1),
        ("operators", 0, "sem_topk", "k"),
        "greater than or equal to 1",
    ),
    (
        "k as text",
        with_op(op="sem_topk", instruction="Best {text}?", k="3"),
        ("operators", 0, "sem_topk", "k"),
        "valid integer",
    ),
    (
        "zero max_tokens",
        with_op(op="sem_map", instruction="{text}", output_column="s", max_tokens=0),
        ("operators", 0, "sem_map", "max_tokens"),
        "greater than",
    ),
    (
        "unknown op field",
        with_op(op="sem_map", instruction="{text}", output_column="s", temperature=0.7),
        ("operators", 0, "sem_map", "temperature"),
        "Extra inputs",
    ),
    (
        "one label",
        with_op(op="sem_classify", instruction="{text}", labels=["yes"]),
        ("operators", 0, "sem_classify", "labels"),
        "at least 2",
    ),
    (
        "empty corpus",
        with_op(op="index_search", corpus=[], query="{text}", k=1),
        ("operators", 0, "index_search", "corpus"),
        "at least 1",
    ),
    (
        "function as code",
        with_op(op="map", function="__import__('os').system('x')", output_column="o"),
        ("operators", 0, "map", "function"),
        "dotted identifier",
    ),
    ("join without right", with_op(**JOIN), ("operators", 0, "sem_join", "right"), "required"),
    (
        "join right without rows",
        with_op(**JOIN, right={"name": "r"}),
        ("operators", 0, "sem_join", "right", "source"),
        "required",
    ),
    (
        "index k zero",
        with_op(**JOIN, right=RIGHT, index={"left": "{text}", "right_column": "x", "k": 0}),
        ("operators", 0, "sem_join", "index", "k"),
        "greater than",
    ),
    (
        "negative max_distance",
        with_op(
            **JOIN, right=RIGHT, index={"left": "{text}", "right_column": "x", "max_distance": -0.5}
        ),
        ("operators", 0, "sem_join", "index", "max_distance"),
        "greater than or equal to 0",
    ),
    (
        "both rows and parquet",
        setting("source", "parquet_b64", value=PARQUET),
        ("source",),
        "exactly one",
    ),
    ("neither rows nor parquet", setting("source", value={}), ("source",), "exactly one"),
    (
        "bad base64",
        setting("source", value={"parquet_b64": "not base64!"}),
        ("source", "parquet_b64"),
        "not base64",
    ),
    (
        "bad parquet bytes",
        setting("source", value={"parquet_b64": NOT_PARQUET}),
        ("source", "parquet_b64"),
        "not a Parquet file",
    ),
    (
        "a list in a row",
        setting("source", "rows", 0, "n", value=[1, 2]),
        ("source", "rows", 0, "n"),
        "valid",
    ),
    (
        "NaN in a row",
        setting("source", "rows", 0, "n", value=float("nan")),
        ("source", "rows", 0, "n"),
        "finite number",
    ),
    (
        "rows not records",
        setting("source", "rows", value=["a"]),
        ("source", "rows", 0),
        "valid dictionary",
    ),
]


@pytest.mark.parametrize(
    ("patch", "loc", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_a_malformed_spec_is_refused_naming_the_field(
    patch: Callable[[dict[str, Any]], None], loc: tuple[Any, ...], message: str
) -> None:
    spec = base_spec()
    patch(spec)
    with pytest.raises(ValidationError) as refused:
        table_from_spec(json.loads(json.dumps(spec)))
    errors = refused.value.errors()
    assert any(error["loc"][: len(loc)] == loc for error in errors), errors
    assert ".".join(map(str, loc)) in str(refused.value)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"op": "sem_filter", "instruction": "Is {title} ok?"}, r"missing column.*'title'"),
        ({"op": "map", "function": "test_spec.nowhere", "output_column": "o"}, "register_function"),
        ({"op": "sem_map", "instruction": "{text}", "output_column": "n"}, "'n' already exists"),
        ({"op": "sem_classify", "instruction": "{text}", "labels": ["a", "A"]}, "must differ"),
        (
            {
                **JOIN,
                "right": RIGHT,
                "index": {
                    "left": "{text}",
                    "right_column": "x",
                    "accept_below": 1.5,
                    "reject_above": 0.5,
                },
            },
            "accept_below",
        ),
    ],
    ids=["unknown column", "unregistered function", "existing column", "same labels", "thresholds"],
)
def test_a_well_formed_spec_of_an_invalid_plan_raises_plan_error(
    op: dict[str, Any], message: str
) -> None:
    spec = base_spec()
    spec["operators"] = [op]
    with pytest.raises(PlanError, match=message):
        table_from_spec(spec)


def test_a_spec_model_or_its_json_builds_the_same_plan() -> None:
    spec = TableSpec.model_validate(
        {**base_spec(), "operators": [{"op": "sem_filter", "instruction": "Is {text} ok?"}]}
    )
    plan = table_from_spec(spec)
    assert plan.explain() == table_from_spec(spec.model_dump()).explain()
    assert plan.to_spec() == spec
