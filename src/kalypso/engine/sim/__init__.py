"""A deterministic simulator of a vLLM engine: paged LRU prefix cache, continuous
batching with chunked prefill and priorities, virtual clock. No model, no GPU."""

from kalypso.engine.sim.block_pool import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from kalypso.engine.sim.costs import PROFILES, CostProfile, get_profile
from kalypso.engine.sim.engine import SimEngine
from kalypso.engine.sim.outputs import SimOutputModel
from kalypso.engine.sim.tokenizer import WordTokenizer

__all__ = [
    "PROFILES",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "CostProfile",
    "KVEvent",
    "SimEngine",
    "SimOutputModel",
    "WordTokenizer",
    "get_profile",
]
