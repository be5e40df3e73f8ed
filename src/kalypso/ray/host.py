"""The body of one replica's Ray actor: it opens an engine from an
:class:`~kalypso.engine.open.EngineSpec` in the actor's process and answers the engine
protocol's calls for it (:class:`~kalypso.ray.engine.RayEngine` is the other side).

Requests and results travel as the protocol's dataclasses (Ray pickles them). The
scheduler stays in the driver; the actor only runs the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kalypso.engine.cost_model import CostModel
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import (
    Engine,
    EngineCapacity,
    EngineError,
    EngineStats,
    GenerateRequest,
    GenerateResult,
    Tokenizer,
)

logger = logging.getLogger(__name__)


@runtime_checkable
class LearningTokenizer(Protocol):
    """A tokenizer that decodes only the ids it has encoded, and can be taught more (the
    simulator's :class:`~kalypso.engine.sim.tokenizer.WordTokenizer`): its copies in the
    driver and in an actor are kept in step by sending the prompt's pieces along."""

    def pieces_for(self, token_ids: Iterable[int]) -> dict[int, str]: ...

    def learn(self, pieces: Mapping[int, str]) -> None: ...


@dataclass(frozen=True)
class HostedEngine:
    """What the driver needs to know of an engine an actor hosts, once."""

    name: str
    capacity: EngineCapacity
    tokenizer: Tokenizer
    cost_model: CostModel | None
    supports_pinning: bool


class EngineHost:
    """One engine in an actor (an async actor: calls run concurrently on its loop)."""

    def __init__(self, spec: EngineSpec) -> None:
        self._spec = spec
        self._engine: Engine | None = None

    async def start(self) -> HostedEngine:
        """Open the engine (once); what the driver needs to know of it."""
        if self._engine is None:
            self._engine = await open_engine(self._spec)
            logger.info("replica actor: %s open", self._engine.name)
        engine = self._engine
        return HostedEngine(
            engine.name,
            engine.capacity,
            engine.tokenizer,
            engine.cost_model,
            engine.supports_pinning,
        )

    def _open(self) -> Engine:
        if self._engine is None:
            raise EngineError("the replica's engine is not open (start() first, or closed)")
        return self._engine

    async def generate(
        self, request: GenerateRequest, pieces: dict[int, str] | None = None
    ) -> GenerateResult:
        """Run ``request``; ``pieces`` first teach a learning tokenizer (the simulator's)
        the prompt's ids the driver's copy knows and this one does not."""
        engine = self._open()
        if pieces and isinstance(engine.tokenizer, LearningTokenizer):
            engine.tokenizer.learn(pieces)
        return await engine.generate(request)

    async def stats(self) -> EngineStats:
        return await self._open().stats()

    async def cost_model(self) -> CostModel | None:
        return self._open().cost_model

    async def reset_prefix_cache(self) -> None:
        await self._open().reset_prefix_cache()

    async def unpin(self, pin_key: str) -> None:
        await self._open().unpin(pin_key)

    async def unpin_all(self) -> None:
        await self._open().unpin_all()

    async def stalled_requests(self) -> int:
        return await self._open().stalled_requests()

    async def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.close()
