"""Workflows as data (kalypso.workflow.spec): every workflow round-trips through JSON to the
same spec, plan, task graph and outputs (the library's, and random ones); malformed specs
are refused naming the field, semantic errors with the DSL's PlanError."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kalypso import PlanError
from kalypso import workflow as wf
from kalypso.core.functions import register_function, unregister_function
from kalypso.workflow.library import BUILDERS, SMALL
from kalypso.workflow.lower import lower
from tests.workflow.recording_sim import RecordingSim


def join(*texts: str | None) -> str:
    return " | ".join("-" if t is None else t for t in texts)


def lengths(*texts: str | None) -> str:
    return ",".join(str(len(t or "")) for t in texts)


def has_digit(*texts: str | None) -> bool:
    return any(c.isdigit() for t in texts for c in (t or ""))


register_function("spec_test.join", join)
register_function("spec_test.lengths", lengths)
register_function("spec_test.has_digit", has_digit)


def round_trip(flow: wf.Workflow) -> wf.Workflow:
    """``flow`` rebuilt from its spec's JSON: the same spec and the same task graph."""
    spec = flow.to_spec()
    again = wf.workflow_from_spec(json.loads(spec.model_dump_json()))
    assert again.to_spec() == spec
    assert lower([again]).graph.explain() == lower([flow]).graph.explain()
    return again


async def assert_same_runs(
    flow: wf.Workflow, again: wf.Workflow, inputs: dict[str, list[str]]
) -> None:
    """The same plan (explained) and the same outputs on the simulator."""
    first, second = RecordingSim(), RecordingSim()
    try:
        plans = [wf.plan(f, e, inputs, query_id="q") for f, e in ((flow, first), (again, second))]
        assert plans[0].explain() == plans[1].explain()
        ran = await wf.arun(flow, first, inputs, query_id="q")
        ran_again = await wf.arun(again, second, inputs, query_id="q")
        pd.testing.assert_frame_equal(ran.outputs, ran_again.outputs)
    finally:
        await first.close()
        await second.close()


def test_a_spec_is_the_workflows_nodes_by_id_and_its_outputs() -> None:
    question = wf.input("question")
    chat = wf.chat(wf.system("Be careful."), wf.user("Q: ", question))
    draft = wf.llm(chat, max_tokens=48, name="draft")
    better = wf.llm(chat.then(draft).user("Improve it."), max_tokens=48, name="revised")
    spec = wf.Workflow({"answer": better}, name="review").to_spec()
    assert json.loads(spec.model_dump_json(exclude_defaults=True)) == {
        "name": "review",
        "nodes": [
            {"type": "input", "id": "question", "name": "question"},
            {
                "type": "llm",
                "id": "draft",
                "name": "draft",
                "messages": [
                    {"role": "system", "parts": ["Be careful."]},
                    {"role": "user", "parts": ["Q: ", {"ref": "question"}]},
                ],
                "max_tokens": 48,
            },
            {
                "type": "llm",
                "id": "revised",
                "name": "revised",
                "messages": [{"role": "user", "parts": ["Improve it."]}],
                "continues": "draft",
                "max_tokens": 48,
            },
        ],
        "outputs": {"answer": "revised"},
    }
    assert (spec.kind, spec.version) == ("workflow", 1)


@pytest.fixture
def registered() -> Iterator[Callable[[str, Callable[..., Any]], None]]:
    """Registers functions for one test, then forgets them."""
    names: list[str] = []

    def add(name: str, function: Callable[..., Any]) -> None:
        register_function(name, function)
        names.append(name)

    yield add
    for name in names:
        unregister_function(name)


@pytest.mark.parametrize("name", sorted(BUILDERS))
async def test_every_library_workflow_round_trips(
    name: str, registered: Callable[[str, Callable[..., Any]], None]
) -> None:
    workload = BUILDERS[name](SMALL[name])
    for day, (flow, inputs) in enumerate(zip(workload.workflows, workload.inputs, strict=True)):
        for value in flow.values:  # trading's debate_text is a lambda: register it here
            if isinstance(value, wf.Fn):
                registered(f"library.{name}{day}.{value.name}", value.function)
        again = round_trip(flow)
        await assert_same_runs(flow, again, {k: list(v[:2]) for k, v in inputs.items()})


async def test_a_cond_round_trips_as_its_decider_branches_and_selection() -> None:
    question = wf.input("question")
    answer = wf.cond(
        has_digit,
        [question],
        then=lambda: wf.llm(wf.user("Easy: ", question), max_tokens=4, name="easy"),
        otherwise=lambda: wf.llm(wf.user("Hard: ", question), max_tokens=4, name="hard"),
        name="pick",
    )
    flow = wf.Workflow({"answer": answer})
    spec = flow.to_spec()
    by_id = {node.id: node for node in spec.nodes}
    assert [(n.type, n.id) for n in spec.nodes] == [
        ("input", "question"),
        ("cond", "pick_if"),
        ("llm", "easy"),
        ("llm", "hard"),
        ("select", "pick"),
    ]
    assert by_id["pick_if"].model_dump()["predicate"] == "spec_test.has_digit"
    assert by_id["hard"].model_dump()["guard"] == {"decider": "pick_if", "expected": False}
    again = round_trip(flow)
    await assert_same_runs(flow, again, {"question": ["no digits", "route 66"]})


def test_a_python_step_or_predicate_must_be_registered() -> None:
    question = wf.input("question")
    step = wf.fn(lambda q: q, question, name="echo")
    with pytest.raises(PlanError, match=r"fn 'echo'.*kalypso\.register_function\(name, fn\)"):
        wf.Workflow({"out": step}).to_spec()
    picked = wf.cond(lambda q: True, [question], lambda: question, lambda: question, name="c")
    with pytest.raises(PlanError, match=r"cond 'c_if': predicate.*register_function"):
        wf.Workflow({"out": picked}).to_spec()


# --- random workflows ------------------------------------------------------------------

WORDS = st.sampled_from(["Q: ", " and ", "\n", "Answer briefly.", "", "{literal}"])
FUNCTIONS = (join, lengths)


@st.composite
def workflows(draw: st.DrawFn) -> wf.Workflow:
    """A random DAG: inputs (the same name may be two objects), fmt texts, LLM calls on
    new or continued conversations, Python steps, and now and then a (nested) cond."""
    names = (f"s{i}" for i in itertools.count())
    pool: list[wf.Value] = [
        wf.input(n)
        for n in draw(st.lists(st.sampled_from(["doc", "question"]), min_size=1, max_size=3))
    ]
    calls: list[wf.LLM] = []

    def values(low: int, high: int) -> list[wf.Value]:
        return draw(st.lists(st.sampled_from(pool), min_size=low, max_size=high))

    def parts() -> list[str | wf.Value]:
        return draw(st.lists(st.one_of(WORDS, st.sampled_from(pool)), min_size=1, max_size=3))

    def text() -> wf.Value:
        args = values(0, 2)
        pieces = [draw(WORDS).replace("{", "{{").replace("}", "}}") for _ in range(len(args) + 1)]
        return wf.fmt("{}".join(pieces), *args)

    def call() -> wf.Value:
        if calls and draw(st.booleans()):
            conversation = draw(st.sampled_from(calls)).history.user(*parts())
        else:
            system = [wf.system(*parts())] if draw(st.booleans()) else []
            conversation = wf.chat(*system, wf.user(*parts()))
        greedy = draw(st.booleans())
        made = wf.llm(
            conversation,
            max_tokens=draw(st.integers(1, 8)),
            name=next(names),
            greedy=greedy,
            temperature=0.0 if greedy else draw(st.sampled_from([0.5, 1.0])),
            first_bound_tokens=draw(st.one_of(st.none(), st.integers(1, 4))),
            choices=draw(st.one_of(st.none(), st.just(["yes", "no"]))),
            cacheable=draw(st.booleans()),
        )
        calls.append(made)
        return made

    def step() -> wf.Value:
        return wf.fn(draw(st.sampled_from(FUNCTIONS)), *values(1, 3), name=next(names))

    def value(depth: int) -> wf.Value:
        kind = draw(st.sampled_from(["text", "llm", "llm", "fn", "cond"][: 5 if depth < 2 else 4]))
        if kind == "cond":
            return wf.cond(
                has_digit,
                values(1, 2),
                then=lambda: value(depth + 1),
                otherwise=lambda: value(depth + 1),
                name=next(names),
            )
        return {"text": text, "llm": call, "fn": step}[kind]()

    for _ in range(draw(st.integers(1, 8))):
        pool.append(value(0))
    outputs = [pool[-1], *values(0, 3)]
    return wf.Workflow({f"out{i}": v for i, v in enumerate(outputs)}, name="random")


@settings(max_examples=40, deadline=None)
@given(flow=workflows())
def test_random_workflows_round_trip(flow: wf.Workflow) -> None:
    again = round_trip(flow)
    inputs = {name: [f"{name} {q}: is {q} odd?" for q in range(3)] for name in flow.inputs}
    asyncio.run(assert_same_runs(flow, again, inputs))


# --- malformed specs -------------------------------------------------------------------


def base_spec() -> dict[str, Any]:
    """nodes: question, pick_if (cond), text, draft, again (llm, continues draft, then
    branch), joined (fn, otherwise branch), pick (select)."""
    question = wf.input("question")
    chat = wf.chat(wf.system("Be brief."), wf.user(wf.fmt("Q: {}", question)))
    draft = wf.llm(chat, max_tokens=8, name="draft")
    picked = wf.cond(
        has_digit,
        [question],
        then=lambda: wf.llm(chat.then(draft).user("Again."), max_tokens=8, name="again"),
        otherwise=lambda: wf.fn(join, draft, name="joined"),
        name="pick",
    )
    spec = wf.Workflow({"answer": picked}, name="base").to_spec().model_dump(mode="json")
    assert [n["id"] for n in spec["nodes"]] == [
        "question",
        "pick_if",
        "text",
        "draft",
        "again",
        "joined",
        "pick",
    ]
    return spec


def test_the_base_spec_is_valid() -> None:
    assert wf.workflow_from_spec(base_spec()).to_spec().model_dump(mode="json") == base_spec()


Edit = Callable[[dict[str, Any]], None]


def node(spec: dict[str, Any], node_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(n for n in spec["nodes"] if n["id"] == node_id)
    return found


def swap(spec: dict[str, Any], a: int, b: int) -> None:
    spec["nodes"][a], spec["nodes"][b] = spec["nodes"][b], spec["nodes"][a]


MALFORMED: list[tuple[str, Edit, tuple[str | int, ...], str]] = [
    (
        "unknown node type",
        lambda s: node(s, "text").update(type="loop"),
        ("nodes", 2),
        "does not match any of the expected tags",
    ),
    (
        "dangling reference",
        lambda s: node(s, "text")["parts"].__setitem__(1, {"ref": "nowhere"}),
        ("nodes", 2, "text", "parts", 1, "ref"),
        "no node has the id 'nowhere'",
    ),
    (
        "duplicate id",
        lambda s: s["nodes"].append({"type": "input", "id": "draft", "name": "draft"}),
        ("nodes", 7, "input", "id"),
        "duplicate node id 'draft' (also nodes[3])",
    ),
    (
        "forward reference",
        lambda s: swap(s, 2, 3),
        ("nodes", 2, "llm", "messages", 1, "parts", 0, "ref"),
        "node 'text' is nodes[3], not before this one",
    ),
    (
        "cycle: a step reading itself",
        lambda s: node(s, "joined")["inputs"].append("joined"),
        ("nodes", 5, "fn", "inputs", 1),
        "a node refers only to earlier nodes",
    ),
    (
        "missing field",
        lambda s: node(s, "draft").pop("max_tokens"),
        ("nodes", 3, "llm", "max_tokens"),
        "Field required",
    ),
    (
        "unknown field",
        lambda s: node(s, "draft").update(top_k=5),
        ("nodes", 3, "llm", "top_k"),
        "Extra inputs are not permitted",
    ),
    (
        "negative max_tokens",
        lambda s: node(s, "again").update(max_tokens=-3),
        ("nodes", 4, "llm", "max_tokens"),
        "greater than or equal to 1",
    ),
    (
        "max_tokens as text",
        lambda s: node(s, "again").update(max_tokens="8"),
        ("nodes", 4, "llm", "max_tokens"),
        "valid integer",
    ),
    (
        "zero first_bound_tokens",
        lambda s: node(s, "draft").update(first_bound_tokens=0),
        ("nodes", 3, "llm", "first_bound_tokens"),
        "greater than or equal to 1",
    ),
    (
        "negative temperature",
        lambda s: node(s, "draft").update(temperature=-0.5),
        ("nodes", 3, "llm", "temperature"),
        "greater than or equal to 0",
    ),
    (
        "one choice",
        lambda s: node(s, "draft").update(choices=["yes"]),
        ("nodes", 3, "llm", "choices"),
        "at least 2 items",
    ),
    (
        "bad role",
        lambda s: node(s, "draft")["messages"][0].update(role="tool"),
        ("nodes", 3, "llm", "messages", 0, "role"),
        "'system', 'user' or 'assistant'",
    ),
    (
        "empty message",
        lambda s: node(s, "draft")["messages"][0].update(parts=[]),
        ("nodes", 3, "llm", "messages", 0, "parts"),
        "at least 1 item",
    ),
    (
        "continuing a non-call",
        lambda s: node(s, "again").update(continues="question"),
        ("nodes", 4, "llm", "continues"),
        "node 'question' has type 'input', not 'llm'",
    ),
    (
        "guard on a non-cond",
        lambda s: node(s, "joined")["guard"].update(decider="draft"),
        ("nodes", 5, "fn", "guard", "decider"),
        "node 'draft' has type 'llm', not 'cond'",
    ),
    (
        "select without a cond",
        lambda s: node(s, "pick").update(decider="joined"),
        ("nodes", 6, "select", "decider"),
        "node 'joined' has type 'fn', not 'cond'",
    ),
    ("no nodes", lambda s: s.update(nodes=[]), ("nodes",), "at least 1 item"),
    ("empty outputs", lambda s: s.update(outputs={}), ("outputs",), "at least 1 item"),
    (
        "output of an unknown id",
        lambda s: s["outputs"].update(answer="nowhere"),
        ("outputs", "answer"),
        "no node has the id 'nowhere'",
    ),
    ("another version", lambda s: s.update(version=2), ("version",), "Input should be 1"),
    ("another kind", lambda s: s.update(kind="table"), ("kind",), "'workflow'"),
]


@pytest.mark.parametrize(
    ("edit", "loc", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in MALFORMED],
)
def test_malformed_specs_are_refused_naming_the_field(
    edit: Edit, loc: tuple[str | int, ...], message: str
) -> None:
    spec = base_spec()
    edit(spec)
    with pytest.raises(ValidationError) as refused:
        wf.workflow_from_spec(copy.deepcopy(spec))
    errors = refused.value.errors()
    assert [e["loc"] for e in errors] == [loc], errors
    assert message in errors[0]["msg"]


SEMANTIC: list[tuple[str, Edit, str]] = [
    (
        "unregistered function",
        lambda s: node(s, "joined").update(function="spec_test.missing"),
        "no function is registered as 'spec_test.missing'",
    ),
    (
        "unregistered predicate",
        lambda s: node(s, "pick_if").update(predicate="spec_test.nope"),
        "no function is registered as 'spec_test.nope'",
    ),
    (
        "function name that is no name",
        lambda s: node(s, "joined").update(function="rm -rf"),
        "a function name is a dotted identifier",
    ),
    ("input name", lambda s: node(s, "question").update(name="a-b"), "input: a name must be"),
    ("call name", lambda s: node(s, "draft").update(name="no name"), "llm: a name must be"),
    (
        "conversation ending with the assistant",
        lambda s: node(s, "again")["messages"][0].update(role="assistant"),
        "add a user turn",
    ),
    ("sampling at temperature 0", lambda s: node(s, "draft").update(greedy=False), "temperature"),
    ("output name", lambda s: s.update(outputs={"the answer": "pick"}), "output: a name"),
]


@pytest.mark.parametrize(
    ("edit", "message"), [pytest.param(*case[1:], id=case[0]) for case in SEMANTIC]
)
def test_well_formed_specs_of_invalid_workflows_raise_the_dsls_plan_error(
    edit: Edit, message: str
) -> None:
    spec = base_spec()
    edit(spec)
    with pytest.raises(PlanError, match=message):
        wf.workflow_from_spec(spec)
