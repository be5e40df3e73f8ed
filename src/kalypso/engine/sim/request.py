"""A request inside the simulated engine: its tokens, block hashes, progress and times."""

from __future__ import annotations

from dataclasses import dataclass, field

from kalypso.engine.blocks import BlockHash, hash_block_tokens, hash_full_blocks
from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.sim.outputs import SimCompletion


@dataclass(eq=False)
class SimRequest:
    """One request's state, as vLLM's ``Request`` keeps it.

    ``all_token_ids`` is the prompt plus the output generated so far, and
    ``block_hashes`` the chained hashes of its full blocks, extended as output tokens
    arrive. ``num_computed_tokens`` counts the tokens whose KV is in the cache (reset to
    0 by a preemption: the request is recomputed). The output it will generate is fixed
    in advance (``completion``); the scheduler reveals it one token per step.

    Times are on the engine's virtual clock, in seconds.
    """

    request: GenerateRequest
    arrival_seq: int
    """Order of arrival: breaks ties between equal priorities."""
    arrival_s: float
    completion: SimCompletion
    block_size_tokens: int
    all_token_ids: list[int] = field(init=False)
    block_hashes: list[BlockHash] = field(init=False)
    num_computed_tokens: int = 0
    num_cached_tokens: int | None = None
    """Prompt tokens found in the prefix cache at first admission (None before)."""
    num_preemptions: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None

    def __post_init__(self) -> None:
        self.all_token_ids = list(self.request.prompt_token_ids)
        self.block_hashes = hash_full_blocks(self.all_token_ids, self.block_size_tokens)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def admission_key(self) -> tuple[int, int]:
        """Lower is admitted first and preempted last: (priority, arrival order)."""
        return (self.request.priority, self.arrival_seq)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def num_remaining_output_tokens(self) -> int:
        """Output tokens it has yet to reveal (its output is fixed at the start)."""
        return len(self.completion.token_ids) - self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.num_remaining_output_tokens == 0

    def append_output_token(self) -> None:
        """Reveal the next output token, hashing the block it completes, if any."""
        self.all_token_ids.append(self.completion.token_ids[self.num_output_tokens])
        if self.num_tokens % self.block_size_tokens == 0:
            parent = self.block_hashes[-1] if self.block_hashes else None
            block = self.all_token_ids[-self.block_size_tokens :]
            self.block_hashes.append(hash_block_tokens(parent, block))
