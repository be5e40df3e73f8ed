"""Kalypso: relational LLM serving.

Semantic query plans (``sem_filter``, ``sem_map``, ``sem_join``, ``sem_topk``, ...) over
tables of text, executed as memory-aware pipelines on vLLM so that the KV cache a tuple's
prompt builds in one operator is reused by the next.
"""

from typing import Any

from kalypso.core.functions import register_function
from kalypso.core.ledger import KVLedger
from kalypso.engine.protocol import (
    Engine,
    EngineCapacity,
    EngineError,
    EngineStats,
    GenerateRequest,
    GenerateResult,
    PromptTooLongError,
)
from kalypso.query import (
    POLICIES,
    IndexJoin,
    Operator,
    OperatorContract,
    PlanError,
    QueryError,
    QueryResult,
    RunOptions,
    Table,
    compare_decisions,
    register_operator,
    table,
)

__version__ = "0.1.0"


def configure(*args: Any, **kwargs: Any) -> None:
    """Choose the engine for the DataFrame methods of :mod:`kalypso.pandas` (importing
    it registers them): see :func:`kalypso.pandas.configure`."""
    from kalypso.pandas import configure as configure_session

    configure_session(*args, **kwargs)


def from_spec(spec: Any) -> Any:
    """The table plan or workflow a spec describes: see :func:`kalypso.jobspec.from_spec`."""
    from kalypso.jobspec import from_spec as build

    return build(spec)


def __getattr__(name: str) -> Any:
    if name == "Client":  # imported on first use: it needs the workflow front end too
        from kalypso.client import Client

        return Client
    raise AttributeError(f"module 'kalypso' has no attribute {name!r}")


__all__ = [
    "POLICIES",
    "Client",
    "Engine",
    "EngineCapacity",
    "EngineError",
    "EngineStats",
    "GenerateRequest",
    "GenerateResult",
    "IndexJoin",
    "KVLedger",
    "Operator",
    "OperatorContract",
    "PlanError",
    "PromptTooLongError",
    "QueryError",
    "QueryResult",
    "RunOptions",
    "Table",
    "__version__",
    "compare_decisions",
    "configure",
    "from_spec",
    "register_function",
    "register_operator",
    "table",
]
