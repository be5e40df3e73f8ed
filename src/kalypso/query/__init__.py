"""Semantic query plans: the API, the operator contract, the planner and the executor."""

from kalypso.query.blocking_ops import SemAgg, SemTopK
from kalypso.query.executor import ExecutionOptions
from kalypso.query.join_ops import CartesianProduct, IndexJoin, JoinPredicate
from kalypso.query.llm_ops import SemClassify, SemExtract, SemFilter, SemMap
from kalypso.query.operators import (
    BlockingOperator,
    CartesianOperator,
    Operator,
    OperatorContract,
    PipelinedOperator,
    register_operator,
    registered_operators,
)
from kalypso.query.plan import QueryResult, Table, table
from kalypso.query.python_ops import IndexSearch, PyFilter, PyMap
from kalypso.query.templates import PlanError
from kalypso.scheduler.policies import POLICY_NAMES as POLICIES

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
    "ExecutionOptions",
    "IndexJoin",
    "IndexSearch",
    "JoinPredicate",
    "Operator",
    "OperatorContract",
    "PipelinedOperator",
    "PlanError",
    "PyFilter",
    "PyMap",
    "QueryResult",
    "SemAgg",
    "SemClassify",
    "SemExtract",
    "SemFilter",
    "SemMap",
    "SemTopK",
    "Table",
    "register_operator",
    "registered_operators",
    "table",
]
