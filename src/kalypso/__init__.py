"""Kalypso: relational LLM serving.

Semantic query plans (``sem_filter``, ``sem_map``, ``sem_join``, ``sem_topk``, ...) over
tables of text, executed as memory-aware pipelines on vLLM so that the KV cache a tuple's
prompt builds in one operator is reused by the next.
"""

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
    QueryResult,
    Table,
    register_operator,
    table,
)

__version__ = "0.1.0"

__all__ = [
    "POLICIES",
    "Engine",
    "EngineCapacity",
    "EngineError",
    "EngineStats",
    "GenerateRequest",
    "GenerateResult",
    "IndexJoin",
    "Operator",
    "OperatorContract",
    "PlanError",
    "PromptTooLongError",
    "QueryResult",
    "Table",
    "__version__",
    "register_operator",
    "table",
]
