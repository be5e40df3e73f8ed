"""How much attention a prefill computes: the query-key pairs of causal attention.

A token's attention cost grows with the tokens before it, so two prefills of the same
number of tokens cost differently when one sits after a long cached prefix. The step
trace (:mod:`kalypso.engine.vllm_step_trace`) counts a step's pairs, the ideal prefix
cache (:mod:`kalypso.core.ideal_cache`) a run's least pairs, and the benchmarks' prefill
floor prices them.
"""

from __future__ import annotations


def attention_pairs(scheduled_tokens: int, computed_before_tokens: int) -> int:
    """The query-key pairs causal attention computes for ``scheduled_tokens`` new tokens of
    one request after ``computed_before_tokens`` earlier ones: each new token attends to
    every earlier token and to itself.

    Raises:
        ValueError: a count is negative.
    """
    if min(scheduled_tokens, computed_before_tokens) < 0:
        raise ValueError("token counts cannot be negative")
    return (
        scheduled_tokens * computed_before_tokens + scheduled_tokens * (scheduled_tokens + 1) // 2
    )
