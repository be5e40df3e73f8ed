"""The driver's side of a replica on Ray: an engine whose every call goes to an actor
(:class:`~kalypso.ray.host.EngineHost`) that hosts the real one.

:class:`RayEngine` implements the engine protocol, so a run, a replica set or a router
uses it as any engine. Its name, capacity, tokenizer and cost model are read once, at
:meth:`RayEngine.start`. Failures map onto the protocol's:

* the actor died (killed, its node lost): :class:`~kalypso.engine.protocol.EngineDeadError`
  in every waiting caller, and in every later call (a replica set then moves the
  replica's work to the others);
* the engine raised in the actor: the same exception, raised here;
* a caller cancelled (a preempted call, a run aborted): the actor's task is cancelled
  too, and the engine aborts the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from kalypso.engine.cost_model import CostModel
from kalypso.engine.open import EngineSpec
from kalypso.engine.protocol import (
    EngineCapacity,
    EngineDeadError,
    EngineError,
    EngineStats,
    GenerateRequest,
    GenerateResult,
    Tokenizer,
)
from kalypso.ray.host import EngineHost, HostedEngine, LearningTokenizer

logger = logging.getLogger(__name__)


class RayEngine:
    """An engine hosted by a Ray actor (see the module docstring). Make it with
    :meth:`start`."""

    def __init__(self, actor: Any, hosted: HostedEngine, number: int) -> None:
        self._actor = actor
        self._hosted = hosted
        self.number = number
        self._dead: str | None = None
        self._taught_ids: set[int] = set()
        """Ids whose pieces the actor's learning tokenizer was sent."""

    @classmethod
    async def start(
        cls, spec: EngineSpec, number: int = 0, *, actor_options: dict[str, Any] | None = None
    ) -> RayEngine:
        """Start an actor hosting an engine opened from ``spec`` (on the Ray cluster this
        process is connected to) and wait until the engine is open.

        Args:
            actor_options: Ray's actor options (``num_cpus``, ``num_gpus``,
                ``scheduling_strategy`` for a placement group...). Default: one CPU.
        """
        options = {"num_cpus": 1, **(actor_options or {})}
        actor: Any = ray.remote(EngineHost).options(**options).remote(spec)
        try:
            hosted: HostedEngine = await actor.start.remote()
        except BaseException:
            ray.kill(actor)
            raise
        logger.info("replica %d: %s on a Ray actor", number, hosted.name)
        return cls(actor, hosted, number)

    @property
    def name(self) -> str:
        return f"ray:{self._hosted.name}"

    @property
    def capacity(self) -> EngineCapacity:
        return self._hosted.capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self._hosted.tokenizer

    @property
    def supports_pinning(self) -> bool:
        return self._hosted.supports_pinning

    @property
    def cost_model(self) -> CostModel | None:
        return self._hosted.cost_model

    @property
    def actor(self) -> Any:
        """The Ray actor handle (to kill it in a test, or read its state)."""
        return self._actor

    async def _call(self, method: str, *args: Any) -> Any:
        if self._dead is not None:
            raise EngineDeadError(f"replica {self.number}: {self._dead}")
        ref = getattr(self._actor, method).remote(*args)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except RayActorError as exc:
            self._dead = f"its Ray actor died ({type(exc).__name__})"
            raise EngineDeadError(f"replica {self.number}: {self._dead}") from exc
        except RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception):
                raise cause from None
            raise EngineError(f"replica {self.number}: {exc}") from exc
        except GetTimeoutError as exc:
            raise EngineError(f"replica {self.number}: no answer from its actor") from exc

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        pieces = None
        new_ids: set[int] = set()
        tokenizer = self._hosted.tokenizer
        if isinstance(tokenizer, LearningTokenizer):
            # ids count as taught only once a request carrying them is done: the actor
            # may start requests sent together in any order
            new_ids = set(request.prompt_token_ids) - self._taught_ids
            pieces = tokenizer.pieces_for(new_ids)
        result: GenerateResult = await self._call("generate", request, pieces)
        self._taught_ids |= new_ids
        return result

    async def stats(self) -> EngineStats:
        stats: EngineStats = await self._call("stats")
        return stats

    async def reset_prefix_cache(self) -> None:
        await self._call("reset_prefix_cache")

    async def unpin(self, pin_key: str) -> None:
        await self._call("unpin", pin_key)

    async def unpin_all(self) -> None:
        await self._call("unpin_all")

    async def stalled_requests(self) -> int:
        count: int = await self._call("stalled_requests")
        return count

    async def close(self) -> None:
        """Close the engine in the actor and end the actor (idempotent)."""
        if self._dead is None:
            with contextlib.suppress(EngineError):
                await self._call("close")
            self._dead = "closed"
        ray.kill(self._actor)
