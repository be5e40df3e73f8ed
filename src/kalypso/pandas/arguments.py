"""Lotus arguments that every operator shares: the reasoning strategy, the per-call
model arguments, the few-shot examples and the cascades; accepted where Kalypso does the
same thing, refused (naming the argument and why) where it does not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kalypso.pandas.errors import LotusArgumentError, check_positive_int, unsupported

PLAIN_STRATEGIES = ("DEFAULT", "FEW_SHOT")
"""Lotus's ``ReasoningStrategy`` members that leave the prompt plain (``COT`` and
``ZS_COT`` ask for reasoning before the answer)."""


def check_strategy(method: str, strategy: Any) -> None:
    """Accept no strategy or a plain one (Lotus's enum or its name)."""
    if strategy is None:
        return
    name = str(getattr(strategy, "name", strategy)).upper()
    if name not in PLAIN_STRATEGIES:
        raise unsupported(
            method,
            "strategy",
            strategy,
            "a decision is one constrained token and a map answers at once; reasoning"
            " before the answer (COT, ZS_COT) is not built",
        )


def check_absent(method: str, **arguments: Any) -> None:
    """Refuse each argument given a value (not None): features Kalypso does not have."""
    reasons = {
        "examples": "few-shot examples are not built (they would be a static prefix every"
        " call shares)",
        "helper_examples": "cascades to a helper model are not built",
        "cascade_args": "cascades to a helper model are not built; an index join cascades"
        " on the embedding distance (kalypso.IndexJoin)",
        "cascade_threshold": "cascades to a helper model are not built",
        "postprocessor": "answers are parsed by the operator; apply a function to the"
        " result's column instead",
        "response_format": "structured output formats are not built",
        "system_prompt": "one system prompt serves a whole plan, so that every operator's"
        " calls share it; give it once with kalypso.configure(system_prompt=...)",
        "n_rerank": "no reranker model is bundled",
    }
    for name, value in arguments.items():
        if value is not None:
            raise unsupported(method, name, value, reasons[name])


def answer_cap_tokens(method: str, model_kwargs: Mapping[str, Any], default: int) -> int:
    """The answer's cap: ``max_tokens`` (or ``max_completion_tokens``) among the model
    arguments, as Lotus passes them to the LM, else ``default``; a greedy
    ``temperature`` of 0 is accepted; any other model argument is refused."""
    cap = default
    for name, value in model_kwargs.items():
        if name in ("max_tokens", "max_completion_tokens"):
            cap = check_positive_int(method, name, value)
        elif name == "temperature":
            if value not in (0, 0.0):
                raise unsupported(
                    method, name, value, "Kalypso decodes greedily (same answers on any schedule)"
                )
        else:
            raise LotusArgumentError(
                method,
                name,
                "not a model argument kalypso.pandas takes (max_tokens, temperature=0)",
            )
    return cap


def check_flags_off(method: str, **flags: Any) -> None:
    """Refuse each flag that is set: outputs Kalypso does not produce."""
    reasons = {
        "return_raw_outputs": "a decision is one constrained token; there is no raw text",
        "keep_index": "the _left_id and _right_id columns are not produced",
    }
    for name, value in flags.items():
        if value:
            raise unsupported(method, name, value, reasons[name])
