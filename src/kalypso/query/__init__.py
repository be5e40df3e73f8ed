"""Semantic query plans: the API, the operator contract, the planner and the executor."""

from kalypso.core.errors import PlanError, QueryError
from kalypso.core.options import RunOptions
from kalypso.core.policies import policy_names
from kalypso.query.blocking_ops import SemAgg, SemTopK
from kalypso.query.join_ops import CartesianProduct, IndexJoin, JoinPredicate
from kalypso.query.llm_ops import SemClassify, SemExtract, SemFilter, SemMap
from kalypso.query.operators import (
    BlockingOperator,
    CartesianOperator,
    LLMOperator,
    Operator,
    OperatorContract,
    PipelinedOperator,
    RowOperator,
    register_operator,
    registered_operators,
)
from kalypso.query.plan import Decision, QueryResult, Table, compare_decisions, table
from kalypso.query.python_ops import IndexSearch, PyFilter, PyMap
from kalypso.query.spec import TableSpec, table_from_spec

POLICIES = tuple(policy_names())

for _name, _factory in (
    ("sem_filter", SemFilter),
    ("sem_map", SemMap),
    ("sem_extract", SemExtract),
    ("sem_classify", SemClassify),
    ("sem_topk", SemTopK),
    ("sem_agg", SemAgg),
    ("index_search", IndexSearch),
    ("map", PyMap),
    ("filter", PyFilter),
):
    register_operator(_name, _factory, replace=True)

__all__ = [
    "POLICIES",
    "BlockingOperator",
    "CartesianOperator",
    "CartesianProduct",
    "Decision",
    "IndexJoin",
    "IndexSearch",
    "JoinPredicate",
    "LLMOperator",
    "Operator",
    "OperatorContract",
    "PipelinedOperator",
    "PlanError",
    "PyFilter",
    "PyMap",
    "QueryError",
    "QueryResult",
    "RowOperator",
    "RunOptions",
    "SemAgg",
    "SemClassify",
    "SemExtract",
    "SemFilter",
    "SemMap",
    "SemTopK",
    "Table",
    "TableSpec",
    "compare_decisions",
    "register_operator",
    "registered_operators",
    "table",
    "table_from_spec",
]
