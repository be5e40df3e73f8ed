"""Explicit KV pinning on stock vLLM: a scheduler subclass loaded through ``scheduler_cls``.

Configure vLLM with ``VLLMSettings(scheduler_cls=PINNING_SCHEDULER_CLS)`` (in-process it
goes to ``AsyncEngineArgs(scheduler_cls=...)``, for a server to ``--scheduler-cls``). The
scheduler then understands these request extra arguments (``SamplingParams.extra_args``;
over HTTP the completions body's ``vllm_xargs``):

* ``{"kalypso_pin": key}`` on an ordinary request: when the request finishes, every block
  of it that carries a prefix-cache hash (for a full-attention model: its full blocks)
  gets one extra reference, kept under ``key``. Not pinned: a request that failed, that
  was aborted before it generated a token, or that its client cancelled (below). An
  abort *after* output is otherwise pinned, because that is how a stop string ends a
  request: vLLM's frontend detects stop strings and then aborts the request in the engine
  core, and the engine core cannot tell that abort from a cancellation. vLLM's
  ``BlockPool`` is reference-counted and only blocks with no reference sit in its free
  queue, the only place blocks are evicted from, so pinned blocks stay cached. Several
  requests may pin under one key. With ``{"kalypso_pin_blocks": n}`` beside it, only the
  first ``n`` of those blocks are pinned (the prefix a client reserved, not the rest of
  the prompt and the answer).
* ``{"kalypso_pin_soft": 1}`` beside ``kalypso_pin``: the pin is *soft*. When a request
  (waiting or running) cannot get the blocks it needs, the scheduler releases soft pins,
  newest key first, and tries again, before making it wait or preempting anything. A key
  stays soft while every pin under it was soft. Newest first: the older a held prefix,
  the sooner the work that reads it is likely to come (a debate's first answers are read
  once all agents have answered); and a run's shared prefixes, pinned first, go last.
  Released blocks join the free queue as cached blocks, so they are evicted only if the
  request still needs more.
* ``{"kalypso_unpin": key}``: a *control request*. The scheduler releases the references
  kept under ``key`` (blocks left unreferenced return to the free queue as cached,
  evictable blocks, last block first as vLLM frees them) and finishes the request at
  once, without queueing it or running the model: it finishes with reason "stop", no
  output token, and ``stop_reason`` ``"kalypso-pinning:released=<n>"`` (``n`` block
  references released; 0 for an unknown key).
* ``{"kalypso_unpin_all": 1}``: the same for every key (deadlock recovery).
* ``{"kalypso_cancel": id}``: a control request sent by a client that gave up on a pinned
  request (Kalypso's engines do on a timeout), so that a request its caller saw fail pins
  nothing, as on the simulator. It names the request by the id the client gave vLLM;
  engine-core ids extend it with ``-<suffix>``, so it matches every request whose id is
  ``id`` or starts with ``id + "-"``. A matching request still queued or running is
  marked not to pin when it finishes (its abort arrives next); one already finished
  has its pinned blocks released. ``n`` in the reply counts the released references.
* ``{"kalypso_ping": 1}``: a control request that releases nothing; its ``stop_reason``
  carrying :data:`CONTROL_STOP_REASON_PREFIX` proves the scheduler is installed.
* ``{"kalypso_stalled": 1}``: a control request whose ``n`` is the number of requests
  left waiting, with none running, by the scheduling of the engine step that answers it
  (0 when anything runs): what a cache full of pins looks like, measured at a step.
  vLLM's ``/metrics`` gauges cannot tell this: they are set at the end of each step, so
  during a long step (a large prefill on CPU) they still show the step before it, which
  may have finished every running request and left new ones waiting.

Control requests need a prompt (one token will do) and ``max_tokens=1``; their priority is
irrelevant: they are answered after the engine step that follows their arrival, even
when the engine is saturated or deadlocked. They go through the normal request path, so
this works in-process (``AsyncLLM``) and over HTTP (``/v1/completions``) alike; vLLM's
utility-call path (``call_utility``/``collective_rpc``) reaches ``EngineCore`` or the
workers, not the scheduler, and has no HTTP route.

Limits:

* Pinned blocks count as used (``kv_cache_usage``); a request that cannot get its blocks
  beside them waits (vLLM reports it ``waiting`` with nothing ``running``) until pins
  are released. Running requests are preempted as usual to make room for each other,
  never pinned blocks.
* vLLM's ``reset_prefix_cache`` succeeds only when no block is in use, so it fails
  while anything is pinned; with ``reset_running_requests=True`` (weight updates, pause
  with cache clearing) the pins are released first, since they would be stale anyway.
* Pins live in the engine-core process: they vanish with it.
* ``kalypso_cancel`` finds only requests the engine core has seen: over HTTP, a request
  cancelled so early that the server has not handed it to the engine core yet is not
  marked, and pins if it is aborted after producing output (with timeouts of seconds,
  not a case that arises).

vLLM internals relied on (vLLM 0.32; none is a stable API, recheck on upgrade):
``Scheduler.add_request``, ``Scheduler._free_blocks`` (called once per finished request
when its blocks are released), ``Scheduler.schedule``, ``Scheduler.get_request_counts``,
``Scheduler.update_from_output`` (returns ``{client_index: EngineCoreOutputs}``),
``Scheduler.has_requests`` (the engine core steps only while it is true),
``Scheduler.reset_prefix_cache``, ``Scheduler.kv_cache_manager`` (``allocate_slots``,
which returns None before changing anything when blocks are short;
``get_blocks(request_id).blocks``, ``block_pool.touch`` and ``block_pool.free_blocks``),
``Request.sampling_params.extra_args``, ``Request.status``, ``Request.client_index``,
``KVCacheBlock.block_hash`` / ``is_null``, ``EngineCoreOutput`` (with its ``events``),
``EngineCoreEvent`` / ``EngineCoreEventType`` and ``FinishReason``.

Importing this module does not import vLLM (the HTTP engine only needs the constants):
:class:`PinningScheduler` is built on first access, through the module's ``__getattr__``,
which is also how vLLM resolves ``PINNING_SCHEDULER_CLS``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.v1.core.sched.scheduler import Scheduler

logger = logging.getLogger(__name__)
"""Logs in the engine-core process: INFO when the scheduler is built, DEBUG per pin,
release and cancellation."""

PINNING_SCHEDULER_CLS = "kalypso.engine.vllm_pinning.PinningScheduler"
"""The ``scheduler_cls`` value that enables explicit pinning."""

PIN_ARG = "kalypso_pin"
"""Extra argument of an ordinary request: the key to pin its blocks under."""
PIN_BLOCKS_ARG = "kalypso_pin_blocks"
"""Extra argument beside :data:`PIN_ARG`: pin only this many leading blocks."""
PIN_SOFT_ARG = "kalypso_pin_soft"
"""Extra argument beside :data:`PIN_ARG`: the pin is soft (given up under pressure)."""
UNPIN_ARG = "kalypso_unpin"
"""Extra argument of a control request: the key to release."""
UNPIN_ALL_ARG = "kalypso_unpin_all"
"""Extra argument of a control request: release every key."""
CANCEL_ARG = "kalypso_cancel"
"""Extra argument of a control request: the client's id of a request it gave up on."""
PING_ARG = "kalypso_ping"
"""Extra argument of a control request that only proves the scheduler is there."""
STALLED_ARG = "kalypso_stalled"
"""Extra argument of a control request: how many requests the next step left waiting
while none ran."""
CONTROL_ARGS = (UNPIN_ARG, UNPIN_ALL_ARG, CANCEL_ARG, PING_ARG, STALLED_ARG)

CONTROL_STOP_REASON_PREFIX = "kalypso-pinning:released="
"""A control request's ``stop_reason`` is this prefix followed by the number of block
references it released."""


def pin_extra_args(
    pin_key: str | None, pin_blocks: int | None, pin_soft: bool
) -> dict[str, Any] | None:
    """The extra arguments that pin an ordinary request's blocks (see the module
    docstring); None for a request that pins nothing."""
    if pin_key is None:
        return None
    extra: dict[str, Any] = {PIN_ARG: pin_key}
    if pin_blocks is not None:
        extra[PIN_BLOCKS_ARG] = pin_blocks
    if pin_soft:
        extra[PIN_SOFT_ARG] = 1
    return extra


def parse_control_stop_reason(stop_reason: object) -> int | None:
    """Block references released, from a control request's ``stop_reason``; None when the
    reply did not come from the pinning scheduler (it is not installed)."""
    if not isinstance(stop_reason, str) or not stop_reason.startswith(CONTROL_STOP_REASON_PREFIX):
        return None
    try:
        return int(stop_reason.removeprefix(CONTROL_STOP_REASON_PREFIX))
    except ValueError:
        return None


def _build_pinning_scheduler() -> type[Scheduler]:
    from vllm.v1.core.kv_cache_utils import KVCacheBlock
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine import (
        EngineCoreEvent,
        EngineCoreEventType,
        EngineCoreOutput,
        EngineCoreOutputs,
        FinishReason,
    )
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    def pins_on_finish(request: Request) -> bool:
        if request.status == RequestStatus.FINISHED_ERROR:
            return False
        if request.status == RequestStatus.FINISHED_ABORTED:  # a stop string, or a cancel
            return request.num_output_tokens > 0
        return True

    class PinningScheduler(Scheduler):
        """vLLM's scheduler plus pins (see the module docstring)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            logger.info("Kalypso's pinning scheduler is installed")
            self.kalypso_pins: dict[str, dict[str, list[KVCacheBlock]]] = {}
            """Pin key -> request id -> blocks holding one reference each, in pinning
            order."""
            self._kalypso_cancelled: set[str] = set()
            """Ids of live requests whose client cancelled them: they do not pin."""
            self._kalypso_replies: list[tuple[int, str, int | None]] = []
            """(client index, request id, number to answer) of control requests answered
            at the next step; None: the requests that step leaves stalled."""
            self._kalypso_stalled = 0
            """Requests the last ``schedule`` left waiting while none ran."""
            self._kalypso_soft: dict[str, None] = {}
            """Keys pinned softly, in pinning order (the last is released first)."""
            self.kalypso_soft_released_blocks = 0
            """Block references soft pins gave up to make room."""
            manager = self.kv_cache_manager
            allocate_slots = manager.allocate_slots

            def allocate_giving_up_soft_pins(*args: Any, **kwargs: Any) -> Any:
                # allocate_slots returns None before changing anything when the free
                # blocks do not suffice, so it can be asked again after each release
                blocks = allocate_slots(*args, **kwargs)
                while blocks is None and self._kalypso_soft:
                    self.kalypso_release_newest_soft_pin()
                    blocks = allocate_slots(*args, **kwargs)
                return blocks

            manager.allocate_slots = allocate_giving_up_soft_pins  # type: ignore[method-assign]

        def add_request(self, request: Request) -> None:
            extra = _extra_args(request)
            if not any(arg in extra for arg in CONTROL_ARGS):
                super().add_request(request)
                return
            answer: int | None
            if UNPIN_ALL_ARG in extra:
                answer = self.kalypso_unpin_all()
            elif UNPIN_ARG in extra:
                answer = self.kalypso_unpin(str(extra[UNPIN_ARG]))
            elif CANCEL_ARG in extra:
                answer = self.kalypso_cancel(str(extra[CANCEL_ARG]))
            elif STALLED_ARG in extra:
                answer = None
            else:
                answer = 0
            self._kalypso_replies.append((request.client_index, request.request_id, answer))
            if self.finished_req_ids_dict is not None:
                self.finished_req_ids_dict[request.client_index].add(request.request_id)

        def kalypso_unpin(self, pin_key: str) -> int:
            """Release the blocks pinned under ``pin_key``; returns how many references."""
            self._kalypso_soft.pop(pin_key, None)
            by_request = self.kalypso_pins.pop(pin_key, {})
            blocks = [block for pinned in by_request.values() for block in pinned]
            # last pinned first into the free queue, so a prefix's head is evicted last
            self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))
            logger.debug("unpinned %r: %d block references released", pin_key, len(blocks))
            return len(blocks)

        def kalypso_release_newest_soft_pin(self) -> int:
            """Release the newest soft key (a request needs its blocks); returns how many
            block references were released."""
            pin_key = next(reversed(self._kalypso_soft))
            released = self.kalypso_unpin(pin_key)
            self.kalypso_soft_released_blocks += released
            logger.debug("soft pin %r given up: %d block references", pin_key, released)
            return released

        def kalypso_unpin_all(self) -> int:
            """Release every pin; returns how many block references were released."""
            return sum(self.kalypso_unpin(key) for key in list(self.kalypso_pins))

        def kalypso_cancel(self, client_id: str) -> int:
            """Requests named by ``client_id`` (see the module docstring) pin nothing: live
            ones are marked, finished ones release their pins; returns the references
            released."""

            def named(request_id: str) -> bool:
                return request_id == client_id or request_id.startswith(client_id + "-")

            self._kalypso_cancelled.update(rid for rid in self.requests if named(rid))
            released = 0
            for pin_key in list(self.kalypso_pins):
                by_request = self.kalypso_pins[pin_key]
                for request_id in [rid for rid in by_request if named(rid)]:
                    blocks = by_request.pop(request_id)
                    self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))
                    released += len(blocks)
                if not by_request:
                    del self.kalypso_pins[pin_key]
                    self._kalypso_soft.pop(pin_key, None)
            logger.debug("cancelled %r: %d block references released", client_id, released)
            return released

        def _free_blocks(self, request: Request) -> None:
            extra = _extra_args(request)
            pin_key = extra.get(PIN_ARG)
            cancelled = request.request_id in self._kalypso_cancelled
            self._kalypso_cancelled.discard(request.request_id)
            if isinstance(pin_key, str) and pins_on_finish(request) and not cancelled:
                groups = self.kv_cache_manager.get_blocks(request.request_id).blocks
                blocks = [
                    block
                    for group in groups
                    for block in group
                    if block.block_hash is not None and not block.is_null
                ]
                limit = extra.get(PIN_BLOCKS_ARG)
                if isinstance(limit, int):
                    blocks = blocks[: max(0, limit)]
                self.kv_cache_manager.block_pool.touch(blocks)
                known = pin_key in self.kalypso_pins
                pinned = self.kalypso_pins.setdefault(pin_key, {})
                pinned.setdefault(request.request_id, []).extend(blocks)
                if not extra.get(PIN_SOFT_ARG):
                    self._kalypso_soft.pop(pin_key, None)
                elif not known:
                    self._kalypso_soft[pin_key] = None
                logger.debug(
                    "pinned %d blocks of %r under %r", len(blocks), request.request_id, pin_key
                )
            super()._free_blocks(request)

        def has_requests(self) -> bool:
            return bool(self._kalypso_replies) or super().has_requests()

        def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
            output = super().schedule(*args, **kwargs)
            running, waiting = self.get_request_counts()
            self._kalypso_stalled = waiting if running == 0 else 0
            return output

        def update_from_output(
            self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
        ) -> dict[int, EngineCoreOutputs]:
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            pending, self._kalypso_replies = self._kalypso_replies, []
            # queued and scheduled now: without these events vLLM's frontend takes the
            # request's scheduled time as 0 and records the whole monotonic clock (hours)
            # as its prefill time, in the histogram the engines' stats read
            now = time.monotonic()
            events = [
                EngineCoreEvent.new_event(EngineCoreEventType.QUEUED, now),
                EngineCoreEvent.new_event(EngineCoreEventType.SCHEDULED, now),
            ]
            replies = [
                (
                    client_index,
                    EngineCoreOutput(
                        request_id=request_id,
                        new_token_ids=[],
                        finish_reason=FinishReason.STOP,
                        stop_reason=f"{CONTROL_STOP_REASON_PREFIX}"
                        f"{self._kalypso_stalled if answer is None else answer}",
                        events=list(events),
                    ),
                )
                for client_index, request_id, answer in pending
            ]
            for client_index, reply in replies:
                eco = outputs.get(client_index)
                if eco is None:
                    outputs[client_index] = EngineCoreOutputs(outputs=[reply])
                else:
                    eco.outputs.append(reply)
            return outputs

        def reset_prefix_cache(
            self, reset_running_requests: bool = False, reset_connector: bool = False
        ) -> bool:
            if reset_running_requests:
                self.kalypso_unpin_all()
            return super().reset_prefix_cache(reset_running_requests, reset_connector)

    PinningScheduler.__module__ = __name__
    PinningScheduler.__qualname__ = "PinningScheduler"
    return PinningScheduler


def _extra_args(request: Any) -> dict[str, Any]:
    params = request.sampling_params
    extra = params.extra_args if params is not None else None
    return extra if isinstance(extra, dict) else {}


def __getattr__(name: str) -> Any:
    if name == "PinningScheduler":
        cls = _build_pinning_scheduler()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
