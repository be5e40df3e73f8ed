"""Small factories for the simulator tests: a tiny pool, a clock with exact binary costs."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.sim import CostProfile, SimEngine

T = TypeVar("T")

UNIT_PROFILE = CostProfile(
    name="unit", per_step_s=1.0, per_prefill_token_s=0.5, per_decode_token_s=0.25
)
"""Costs that are exact in binary floating point, so clock sums compare with ==."""


def make_engine(
    num_blocks: int = 16,
    block_size_tokens: int = 4,
    max_model_len_tokens: int = 256,
    **kwargs: Any,
) -> SimEngine:
    return SimEngine(
        UNIT_PROFILE,
        num_blocks=num_blocks,
        block_size_tokens=block_size_tokens,
        max_model_len_tokens=max_model_len_tokens,
        **kwargs,
    )


def make_request(
    request_id: str,
    prompt_token_ids: Sequence[int],
    max_tokens: int = 1,
    *,
    ignore_eos: bool = True,
    **kwargs: Any,
) -> GenerateRequest:
    """A request; by default it generates exactly ``max_tokens`` tokens."""
    return GenerateRequest(
        request_id, tuple(prompt_token_ids), max_tokens, ignore_eos=ignore_eos, **kwargs
    )


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)
