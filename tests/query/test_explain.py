"""``explain()`` on the four plan shapes of the paper's evaluation (section 7.2) and on
plans with blocking operators.

The text is parsed back into pipelines, stages and operator lines, so each test states
the expected shape as data: which operators (by id) sit in which stage, their contract
flags and the output columns. Plans over index-based operators must be explainable
without the embedding model: building and explaining them must not load it nor build
any vector index.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd
import pytest

import kalypso
from kalypso.query import (
    CartesianProduct,
    IndexJoin,
    IndexSearch,
    JoinPredicate,
    Operator,
    PyFilter,
    PyMap,
    SemAgg,
    SemClassify,
    SemExtract,
    SemFilter,
    SemMap,
    SemTopK,
)
from kalypso.query import index as index_module

PIPELINING = ("pipelining",)
PREDICATE = ("pipelining", "predicate")
PRODUCT = ("pipelining", "cartesian-product")
BLOCKING = ("blocking",)


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class OpLine:
    op_id: str
    description: str
    flags: tuple[str, ...]


@dataclass
class StageText:
    number: int
    source: str
    ops: list[OpLine] = field(default_factory=list)

    @property
    def op_ids(self) -> list[str]:
        return [op.op_id for op in self.ops]


@dataclass
class PipelineText:
    number: int
    barrier: OpLine | None = None
    stages: list[StageText] = field(default_factory=list)


@dataclass
class ExplainText:
    source_name: str
    source_rows: int
    num_operators: int
    num_pipelines: int
    pipelines: list[PipelineText]
    output_columns: tuple[str, ...]

    def op(self, op_id: str) -> OpLine:
        for pipeline in self.pipelines:
            if pipeline.barrier is not None and pipeline.barrier.op_id == op_id:
                return pipeline.barrier
            for stage in pipeline.stages:
                for op in stage.ops:
                    if op.op_id == op_id:
                        return op
        raise KeyError(op_id)


_HEADER = re.compile(
    r"^Plan over '(?P<name>.*)' \((?P<rows>\d+) rows\): (?P<ops>\d+) operators,"
    r" (?P<pipes>\d+) pipeline\(s\)$"
)
_OP = re.compile(r"^\[(?P<id>[^\]]+)\] (?P<rest>.*)$")


def _op_line(text: str) -> OpLine:
    match = _OP.match(text)
    assert match is not None, f"not an operator line: {text!r}"
    description, flags = match.group("rest").rsplit("  (", 1)
    assert flags.endswith(")"), text
    return OpLine(match.group("id"), description, tuple(flags[:-1].split(", ")))


def parse_explain(text: str) -> ExplainText:
    lines = text.splitlines()
    header = _HEADER.match(lines[0])
    assert header is not None, lines[0]
    assert lines[-1].startswith("Output columns: "), lines[-1]
    pipelines: list[PipelineText] = []
    for line in lines[1:-1]:
        if line.startswith("Pipeline "):
            pipelines.append(PipelineText(int(line.removeprefix("Pipeline "))))
        elif line.startswith("  barrier  "):
            pipelines[-1].barrier = _op_line(line.removeprefix("  barrier  "))
        elif line.startswith("  Stage "):
            number, _, source = line.removeprefix("  Stage ").partition(" <- ")
            pipelines[-1].stages.append(StageText(int(number), source))
        elif line.startswith("    ["):
            pipelines[-1].stages[-1].ops.append(_op_line(line.strip()))
        else:
            raise AssertionError(f"unexpected explain line {line!r}")
    columns = lines[-1].removeprefix("Output columns: ")
    return ExplainText(
        source_name=header.group("name"),
        source_rows=int(header.group("rows")),
        num_operators=int(header.group("ops")),
        num_pipelines=int(header.group("pipes")),
        pipelines=pipelines,
        output_columns=tuple(columns.split(", ")) if columns else (),
    )


# --------------------------------------------------------------------------- data


@pytest.fixture
def no_embedding_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Make loading the embedding model or building a vector index fail loudly, and
    record any attempt (in case a caller swallows the error)."""
    attempts: list[str] = []

    def refuse_load(*args: object, **kwargs: object) -> None:
        attempts.append("load_sentence_transformer")
        raise AssertionError("explain() must not load the embedding model")

    def refuse_build(*args: object, **kwargs: object) -> None:
        attempts.append("VectorIndex.build")
        raise AssertionError("explain() must not build a vector index")

    monkeypatch.setattr(index_module, "load_sentence_transformer", refuse_load)
    monkeypatch.setattr(index_module.VectorIndex, "build", refuse_build)
    yield attempts
    assert attempts == []


def claims() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "claim_id": [0, 1, 2],
            "claim": [
                "Hamlet was written by William Shakespeare.",
                "The Eiffel Tower is in Berlin.",
                "The Pacific is the largest ocean.",
            ],
        }
    )


WIKI = [
    "William Shakespeare wrote the tragedy Hamlet around 1600.",
    "The Eiffel Tower in Paris was completed in 1889.",
    "The Pacific is the largest and deepest ocean on Earth.",
]


def notes() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "note_id": [0, 1],
            "text": [
                "0 A 54-year-old woman presents with chest pain.\n1 ECG shows ST elevation.",
                "0 A 7-year-old boy has a fever.\n1 He is given aspirin for the fever.",
            ],
        }
    )


def articles() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "article_id": [0, 1],
            "article": [
                "A patient on amoxicillin developed a widespread rash and nausea.",
                "After starting statins the patient reported muscle pain.",
            ],
        }
    )


def reactions() -> kalypso.Table:
    names = ["rash", "nausea", "myalgia", "headache", "hepatotoxicity"]
    return kalypso.table(pd.DataFrame({"reaction": names}), name="reactions")


def contracts() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "contract_id": [0, 1],
            "text": [
                "Non-Disclosure Agreement. The Receiving Party shall keep all"
                " Confidential Information secret for five years.",
                "Minutes of the board meeting held on 3 March.",
            ],
        }
    )


def hypotheses() -> kalypso.Table:
    """17 hypotheses, as in ContractNLI."""
    frame = pd.DataFrame(
        {
            "hypothesis_id": [f"nda-{i}" for i in range(1, 18)],
            "hypothesis": [f"Statement number {i} about confidentiality." for i in range(1, 18)],
        }
    )
    return kalypso.table(frame, name="hypotheses")


# --------------------------------------------------------------------------- the four paper plans


def test_fever_is_one_stage_map_search_filter(no_embedding_model: list[str]) -> None:
    plan = (
        kalypso.table(claims(), name="claims")
        .sem_map("Write two concise search queries to verify the {claim}.", "queries")
        .index_search(WIKI, "{queries}", k=2)
        .sem_filter("Is the {claim} supported by the {evidence}?")
    )
    parsed = parse_explain(plan.explain())

    assert (parsed.source_name, parsed.source_rows) == ("claims", 3)
    assert (parsed.num_operators, parsed.num_pipelines) == (3, 1)
    [pipeline] = parsed.pipelines
    assert pipeline.barrier is None
    [stage] = pipeline.stages
    assert stage.source == "scan claims"
    assert stage.op_ids == ["1:sem_map", "2:index_search", "3:sem_filter"]
    assert [op.flags for op in stage.ops] == [PIPELINING, PIPELINING, PREDICATE]
    assert parsed.op("2:index_search").description == (
        "index_search '{queries}' k=2 over 3 passages -> evidence"
    )
    assert parsed.output_columns == ("claim_id", "claim", "queries", "evidence")
    assert parsed.output_columns == plan.columns


def test_medec_is_one_stage_filter_map_map() -> None:
    plan = (
        kalypso.table(notes(), name="notes")
        .sem_filter("Answer true if any numbered sentence in the {text} is medically inconsistent.")
        .sem_map(
            "Identify the numbered sentence of the {text} that contains the error.", "sentence"
        )
        .sem_map("Generate the corrected version of the erroneous sentence of the {text}.", "fix")
    )
    parsed = parse_explain(plan.explain())

    assert (parsed.num_operators, parsed.num_pipelines) == (3, 1)
    [stage] = parsed.pipelines[0].stages
    assert stage.source == "scan notes"
    assert stage.op_ids == ["1:sem_filter", "2:sem_map", "3:sem_map"]
    assert [op.flags for op in stage.ops] == [PREDICATE, PIPELINING, PIPELINING]
    assert parsed.op("2:sem_map").description.endswith("-> sentence")
    assert parsed.op("3:sem_map").description.endswith("-> fix")
    assert parsed.output_columns == ("note_id", "text", "sentence", "fix")


def test_biodex_is_two_stages_split_by_the_indexed_product(no_embedding_model: list[str]) -> None:
    plan = (
        kalypso.table(articles(), name="articles")
        .sem_map("Extract the adverse drug reaction labels described in the {article}.", "labels")
        .sem_join(
            reactions(),
            "Does the {article} describe the adverse drug reaction {reaction}?",
            index=IndexJoin("{labels}", "reaction", k=3, accept_below=0.1, reject_above=0.6),
        )
    )
    parsed = parse_explain(plan.explain())

    assert (parsed.num_operators, parsed.num_pipelines) == (3, 1)
    [pipeline] = parsed.pipelines
    first, second = pipeline.stages
    assert (first.number, first.source, first.op_ids) == (1, "scan articles", ["1:sem_map"])
    assert (second.number, second.source) == (2, "")
    assert second.op_ids == ["2:cartesian_product", "3:sem_join"]
    product, predicate = second.ops
    assert product.flags == PRODUCT
    assert product.description == (
        "indexed_cartesian_product x reactions (5 rows) on reaction k=3 max_distance=None"
    )
    assert predicate.flags == PREDICATE
    assert predicate.description.endswith("cascade(accept<0.1, reject>0.6)")
    assert parsed.output_columns == ("article_id", "article", "labels", "reaction", "join_distance")


def test_contractnli_is_two_stages_split_by_the_full_product() -> None:
    plan = (
        kalypso.table(contracts(), name="contracts")
        .sem_filter("Is the {text} a valid contract with substantive confidentiality obligations?")
        .sem_join(hypotheses(), "Does the {text} entail the {hypothesis}?")
        .sem_map("Explain, citing the clause of the {text}, why it entails {hypothesis}.", "why")
    )
    parsed = parse_explain(plan.explain())

    assert (parsed.num_operators, parsed.num_pipelines) == (4, 1)
    first, second = parsed.pipelines[0].stages
    assert first.op_ids == ["1:sem_filter"]
    assert second.op_ids == ["2:cartesian_product", "3:sem_join", "4:sem_map"]
    assert [op.flags for op in second.ops] == [PRODUCT, PREDICATE, PIPELINING]
    assert second.ops[0].description == "cartesian_product x hypotheses (17 rows)"
    assert "cascade" not in second.ops[1].description
    assert parsed.output_columns == ("contract_id", "text", "hypothesis_id", "hypothesis", "why")


# --------------------------------------------------------------------------- blocking operators


def test_sem_topk_starts_a_second_pipeline_with_a_barrier() -> None:
    plan = (
        kalypso.table(notes(), name="notes")
        .sem_filter("Does the {text} mention a child?")
        .sem_topk("Which {text} is most urgent?", k=1)
        .sem_map("Summarize the {text}.", "summary")
    )
    parsed = parse_explain(plan.explain())

    assert (parsed.num_operators, parsed.num_pipelines) == (3, 2)
    one, two = parsed.pipelines
    assert one.barrier is None
    assert [(s.number, s.source, s.op_ids) for s in one.stages] == [
        (1, "scan notes", ["1:sem_filter"])
    ]
    assert two.barrier == OpLine(
        "2:sem_topk", "sem_topk k=1 'Which {text} is most urgent?'", BLOCKING
    )
    assert [(s.number, s.source, s.op_ids) for s in two.stages] == [
        (1, "materialized input", ["3:sem_map"])
    ]
    assert parsed.output_columns == ("note_id", "text", "topk_score", "summary")


def test_sem_agg_ends_the_plan_in_its_own_pipeline() -> None:
    plan = (
        kalypso.table(notes(), name="notes")
        .sem_filter("Does the {text} mention a child?")
        .sem_agg("Summarize the findings of every {text}.", "report")
    )
    parsed = parse_explain(plan.explain())

    assert parsed.num_pipelines == 2
    assert parsed.pipelines[1].barrier == OpLine(
        "2:sem_agg", "sem_agg 'Summarize the findings of every {text}.' -> report", BLOCKING
    )
    assert [s.op_ids for s in parsed.pipelines[1].stages] == [[]]
    assert parsed.output_columns == ("report",)


def test_planner_docstring_example_splits_pipelines_then_stages() -> None:
    """scan -> sem_filter -> sem_join(H) -> sem_map -> sem_topk -> sem_map (planner.py)."""
    plan = (
        kalypso.table(contracts(), name="contracts")
        .sem_filter("Is the {text} a contract?")
        .sem_join(hypotheses(), "Does the {text} entail the {hypothesis}?")
        .sem_map("Explain why the {text} entails the {hypothesis}.", "why")
        .sem_topk("Is the {why} convincing?", k=3)
        .sem_map("Shorten the {why}.", "short")
    )
    parsed = parse_explain(plan.explain())

    one, two = parsed.pipelines
    assert [s.op_ids for s in one.stages] == [
        ["1:sem_filter"],
        ["2:cartesian_product", "3:sem_join", "4:sem_map"],
    ]
    assert two.barrier is not None and two.barrier.op_id == "5:sem_topk"
    assert [s.op_ids for s in two.stages] == [["6:sem_map"]]
    assert parsed.num_operators == 6


def test_plan_that_starts_with_a_join_has_an_empty_scan_stage() -> None:
    plan = kalypso.table(contracts(), name="contracts").sem_join(
        hypotheses(), "Does the {text} entail the {hypothesis}?"
    )
    parsed = parse_explain(plan.explain())

    first, second = parsed.pipelines[0].stages
    assert (first.source, first.op_ids) == ("scan contracts", [])
    assert second.op_ids == ["1:cartesian_product", "2:sem_join"]


def test_right_columns_that_clash_are_renamed_in_explain() -> None:
    right = pd.DataFrame({"text": ["a clause"], "hypothesis": ["it is secret"]})
    plan = kalypso.table(contracts()).sem_join(right, "Does {text} contain {text_right}?")
    parsed = parse_explain(plan.explain())

    assert parsed.op("1:cartesian_product").description == "cartesian_product x right (1 rows)"
    assert parsed.output_columns == ("contract_id", "text", "text_right", "hypothesis")


# --------------------------------------------------------------------------- contracts


@pytest.mark.parametrize(
    ("operator", "flags"),
    [
        (SemFilter("Is {text} ok?"), PREDICATE),
        (SemMap("Summarize {text}.", "s"), PIPELINING),
        (SemExtract("Read {text}.", ["a", "b"]), PIPELINING),
        (SemClassify("Classify {text}.", ["x", "y"]), PIPELINING),
        (IndexSearch(["p1", "p2"], "{text}", k=1), PIPELINING),
        (PyMap(len, "n"), PIPELINING),
        (PyFilter(bool), PREDICATE),
        (CartesianProduct(pd.DataFrame({"h": ["x"]})), PRODUCT),
        (JoinPredicate("Does {text} entail {h}?"), PREDICATE),
        (SemTopK("Rank {text}.", k=2), BLOCKING),
        (SemAgg("Summarize {text}."), BLOCKING),
    ],
    ids=lambda value: getattr(value, "kind", None),
)
def test_contract_flags_match_table_1(operator: Operator, flags: tuple[str, ...]) -> None:
    assert tuple(operator.contract.flags().split(", ")) == flags


def test_explain_with_an_engine_states_what_a_step_costs_there() -> None:
    from kalypso.engine.sim import SimEngine

    plan = kalypso.table(pd.DataFrame({"text": ["a", "b"]})).sem_filter("Is {text} short?")
    engine = SimEngine("llama-3.3-70b-4xgpu", num_blocks=64, max_num_seqs=32)
    first, *rest = plan.explain(engine).splitlines()
    assert first == (
        "engine sim:llama-3.3-70b-4xgpu: cost model 22.00 ms a step + 0.150 ms a decoding"
        " sequence + 83.3 us a prefill token (12,000 tokens/s); at most 2,048 tokens and 32"
        " sequences a step; 32 sequences decode 26.4x faster together than one by one"
        " (profile llama-3.3-70b-4xgpu)"
    )
    assert "\n".join(rest) == plan.explain()
