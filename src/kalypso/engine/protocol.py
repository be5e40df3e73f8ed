"""The engine protocol: what Kalypso needs from an LLM serving engine.

The engine layer knows nothing of query plans. Everything above it (planner, scheduler)
sees only what this module defines:

* requests given as *token ids* (so prompts of dependent operators share a prefix to the
  token and to the block), each with its own ``max_tokens`` and ``priority``;
* per-request results with the output, the finish reason and the number of prompt tokens
  the engine found in its prefix cache (``cached_tokens``);
* the engine's KV capacity in blocks and tokens, and live statistics.

Three backends implement it: :class:`kalypso.engine.vllm_local.LocalVLLMEngine`
(vLLM in-process), :class:`kalypso.engine.vllm_http.HTTPVLLMEngine` (a vLLM server) and
:class:`kalypso.engine.sim.SimEngine` (a deterministic simulator of a paged LRU prefix cache).

Priority follows vLLM's convention: a *lower* number is admitted first; ties are admitted
in arrival order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from kalypso.engine.blocks import blocks_for
from kalypso.engine.cost_model import CostModel

FinishReason = Literal["stop", "length"]
"""Why a request finished. An aborted request is never a result: engines raise
:class:`RequestAbortedError` instead."""


class EngineError(RuntimeError):
    """An engine failed or refused a request; the message says what to do about it."""


class EngineDeadError(EngineError):
    """The engine can serve no more requests: it was closed, its process died, or it can no
    longer be reached. Every later call raises it too. A run that isolates call errors
    (``RunOptions.isolate_call_errors``) still fails on it: the calls it would mark failed
    are the engine's loss, not theirs."""


class RequestAbortedError(EngineError):
    """The engine aborted a request (it was cancelled server-side, or the engine gave up on
    it). Raised instead of returning a result, so an abort is never taken for an answer."""


class EngineTimeoutError(EngineError):
    """A request did not finish within its ``timeout_s``; it was cancelled in the engine."""


class PromptTooLongError(EngineError, ValueError):
    """A prompt (plus its ``max_tokens``) does not fit the model's context window.

    Raised before the request reaches the engine; names the request.
    """


class UnsupportedFeatureError(EngineError):
    """The backend does not implement an optional feature (for example explicit pinning)."""


@dataclass(frozen=True)
class GenerateRequest:
    """One completion request, prompt given as token ids.

    Attributes:
        request_id: unique among the requests in flight on one engine.
        prompt_token_ids: the full prompt, already tokenized by the engine's tokenizer.
        max_tokens: upper bound on generated tokens; hitting it finishes with "length".
        priority: lower is admitted first (vLLM's convention); ties in arrival order.
        greedy: greedy decoding (temperature 0) when true, else ``temperature`` sampling.
        temperature: used only when ``greedy`` is false.
        top_p: nucleus sampling (1.0: off); used only when ``greedy`` is false.
        seed: the sampling seed of this request (None: the engine's); used only when
            ``greedy`` is false. The simulator does not sample: its outputs depend on the
            prompt alone.
        stop: strings that end generation (finish reason "stop"), not included in the text.
        ignore_eos: keep generating past the end-of-sequence token (for load generation).
        pin_key: explicit pinning: when the request finishes, its full (cached) blocks
            keep a reference under this key until ``Engine.unpin``. Backends without
            pinning reject a request that sets it with :class:`UnsupportedFeatureError`.
        pin_blocks: with ``pin_key``, pin only the first this many full blocks (None:
            all of them).
        pin_soft: with ``pin_key``, the pin is *soft*: the engine gives it up by itself,
            newest soft pin first, when a request cannot get the blocks it needs (instead
            of making that request wait or preempting one).
        allowed_token_ids: when set, every generated token is one of these ids
            (constrained decoding: one-token decisions use it with ``max_tokens=1``).
        logprobs: when set, the result carries, for each generated position, the
            ``logprobs`` most likely token ids with their log-probabilities. Under
            ``allowed_token_ids`` they are taken after the constraint (renormalised over
            the allowed ids), so a decision's margin compares its candidates.
        timeout_s: the request fails with :class:`EngineTimeoutError` (and is cancelled in
            the engine) if it has not finished this many seconds after submission; None:
            the engine's default (every engine has one).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    priority: int = 0
    greedy: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    pin_key: str | None = None
    pin_blocks: int | None = None
    pin_soft: bool = False
    allowed_token_ids: tuple[int, ...] | None = None
    logprobs: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be a non-empty string")
        if len(self.prompt_token_ids) == 0:
            raise ValueError(f"request {self.request_id!r}: the prompt is empty")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.request_id!r}: max_tokens must be >= 1")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"request {self.request_id!r}: sampling needs temperature > 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"request {self.request_id!r}: top_p must be in (0, 1]")
        if not isinstance(self.prompt_token_ids, tuple):
            object.__setattr__(self, "prompt_token_ids", tuple(self.prompt_token_ids))
        if self.pin_key is None and (self.pin_blocks is not None or self.pin_soft):
            raise ValueError(f"request {self.request_id!r}: pin_blocks and pin_soft need a pin_key")
        if self.pin_blocks is not None and self.pin_blocks < 0:
            raise ValueError(f"request {self.request_id!r}: pin_blocks must be >= 0")
        if self.allowed_token_ids is not None:
            if not self.allowed_token_ids:
                raise ValueError(f"request {self.request_id!r}: allowed_token_ids is empty")
            object.__setattr__(self, "allowed_token_ids", tuple(self.allowed_token_ids))
        if self.logprobs is not None and self.logprobs < 1:
            raise ValueError(f"request {self.request_id!r}: logprobs must be >= 1")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"request {self.request_id!r}: timeout_s must be > 0")


@dataclass(frozen=True)
class RequestTimings:
    """Seconds from submission (on the engine's clock: wall time, or virtual for the sim)."""

    queued_s: float
    """Time waiting before the engine first scheduled the request (0 when unknown)."""
    first_token_s: float
    """Time to first generated token."""
    total_s: float
    """Time until the request finished."""
    scheduled_at_s: float = 0.0
    """When the engine first scheduled the request, on the engine's own clock. Comparable
    only between requests of one engine: sorting by it gives the admission order."""

    @property
    def prefill_s(self) -> float:
        """From first scheduled to first token (0 when the engine does not report it)."""
        return max(0.0, self.first_token_s - self.queued_s) if self.first_token_s else 0.0

    @property
    def decode_s(self) -> float:
        """From first token to the end (0 when the engine does not report it)."""
        return max(0.0, self.total_s - self.first_token_s) if self.first_token_s else 0.0


@dataclass(frozen=True)
class GenerateResult:
    """What the engine returned for one request."""

    request_id: str
    output_token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens served from the prefix cache (always a multiple of the block size
    for a paged cache, and at most ``prompt_tokens - 1``: the last prompt token is always
    computed to produce the first output)."""
    timings: RequestTimings
    logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    """When requested: per generated position, ``(token id, logprob)`` pairs, most likely
    first (see :attr:`GenerateRequest.logprobs`)."""
    token_logprobs: tuple[float, ...] = ()
    """When logprobs were requested: each generated token's own log-probability (the
    sampled token, whether or not it is among the most likely ``logprobs``)."""

    @property
    def output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens the engine actually computed."""
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True)
class EngineCapacity:
    """The KV cache as the engine allocated it."""

    num_blocks: int
    """Blocks requests can hold (for vLLM, those it allocated less its null block)."""
    block_size_tokens: int
    max_model_len_tokens: int
    """Longest sequence (prompt + output) one request may have."""
    max_running_requests: int | None = None
    """Most requests the engine runs at once (vLLM's ``max_num_seqs``), when known: a
    server at a URL does not report it, so an HTTP engine knows it only when told (as
    :func:`~kalypso.engine.open.open_engine` does for a server it starts)."""

    @property
    def total_tokens(self) -> int:
        return self.num_blocks * self.block_size_tokens

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens (rounded up)."""
        return blocks_for(num_tokens, self.block_size_tokens)


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's scheduler and prefix cache.

    Prefix-cache counters are cumulative since the engine started, in tokens, as vLLM
    reports them: ``queries`` counts prompt tokens looked up, ``hits`` those found.
    """

    running_requests: int
    waiting_requests: int
    prefix_cache_queries_tokens: int
    prefix_cache_hits_tokens: int
    kv_usage_fraction: float
    """Fraction of blocks held by running (or pinned) requests; cached-but-free blocks
    are not counted, as in vLLM."""
    prefill_time_s: float = 0.0
    """Cumulative seconds requests spent in prefill (vLLM's request prefill histogram, or
    the engine's own timings; virtual seconds on the simulator)."""
    decode_time_s: float = 0.0
    """Cumulative seconds requests spent decoding."""
    preemptions: int = 0
    """Running requests preempted so far (their blocks freed, their prompt and output
    recomputed when they run again): vLLM's ``num_preemptions`` counter."""


@runtime_checkable
class Tokenizer(Protocol):
    """Encodes prompts to the engine's token ids, decodes outputs, renders the chat template.

    Two encodings, so data can never forge control tokens:

    * :meth:`encode` is for *data* (cell values, instructions, generated text): a
      special-token string inside it (``"<|im_end|>"``) is encoded as ordinary text,
      never as the control id;
    * :meth:`encode_control` is for *template* text (what :meth:`render_chat` produced
      around the contents): special-token strings become their control ids.
    """

    def encode(self, text: str) -> list[int]:
        """Token ids of data ``text``: no special tokens added, none recognised."""
        ...

    def encode_control(self, text: str) -> list[int]:
        """Token ids of template ``text``: special-token strings become control ids."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    @property
    def eos_token_id(self) -> int | None: ...

    def render_chat(
        self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool
    ) -> str:
        """The model's own chat template applied to ``(role, content)`` messages, as text
        (roles: "system", "user", "assistant"). A template without a system role folds
        the system message into the first user turn, as the model expects."""
        ...


@runtime_checkable
class Engine(Protocol):
    """An async LLM engine with an observable prefix cache.

    Contract:
        * ``generate`` may be awaited concurrently from many tasks; the engine batches
          whatever is in flight (continuous batching) and admits by ``priority``.
        * A prompt that cannot fit the context is rejected with
          :class:`PromptTooLongError` before it reaches the engine.
        * A failure of the engine (a dead subprocess or server) raises
          :class:`EngineError` in every waiting caller.
        * ``close`` stops everything the engine started; it is idempotent.
    """

    @property
    def name(self) -> str:
        """Short description, for reports ("vllm-local:<model>", "sim:<profile>")."""
        ...

    @property
    def capacity(self) -> EngineCapacity: ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def supports_pinning(self) -> bool:
        """Whether requests may carry a ``pin_key`` and ``unpin`` releases it."""
        ...

    @property
    def cost_model(self) -> CostModel | None:
        """What a step costs on this engine, as of now (:mod:`kalypso.engine.cost_model`):
        the simulator's profile; for vLLM a calibration or the user's model, refitted
        from the steps it reports. None when unknown: policies then keep the batch as
        wide as the engine allows."""
        ...

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Run one request to completion."""
        ...

    async def stats(self) -> EngineStats: ...

    async def reset_prefix_cache(self) -> None:
        """Forget every cached prefix not held by a running request."""
        ...

    async def unpin(self, pin_key: str) -> None:
        """Release the blocks kept under ``pin_key`` (no-op if nothing is pinned)."""
        ...

    async def unpin_all(self) -> None:
        """Release every pin (deadlock recovery)."""
        ...

    async def stalled_requests(self) -> int:
        """Requests the engine's next scheduling step leaves waiting while none runs (0
        when anything runs): how a cache full of pins shows. Needs pinning (it is asked
        only where pins are). Unlike :meth:`stats`, which vLLM's server reports as of the
        end of the last step, it cannot mistake a long step for a stall."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class HostWorkAware(Protocol):
    """An engine that must know when its caller works off the event loop.

    Only the simulator needs it: its virtual clock advances one engine step at a time,
    whatever the host does meanwhile, so a Python step running in a thread (an index
    lookup, a blocking function) would otherwise be charged as the many steps the engine
    takes, nearly empty, while it runs, and virtual times would depend on the host's
    speed. Real engines overlap such work with their steps and do not implement this.
    """

    def host_work(self) -> contextlib.AbstractContextManager[None]:
        """Held while the caller runs work that will feed the engine (see the class)."""
        ...


@contextlib.contextmanager
def host_work(engine: object) -> Iterator[None]:
    """``engine.host_work()`` for a :class:`HostWorkAware` engine, else nothing: wrap a
    Python step run off the event loop in it."""
    if isinstance(engine, HostWorkAware):
        with engine.host_work():
            yield
    else:
        yield


def as_finish_reason(value: object, request_id: str) -> FinishReason:
    """An engine's finish reason as ours.

    Raises:
        RequestAbortedError: anything but "stop" or "length" (an abort is never an answer).
    """
    if value == "stop":
        return "stop"
    if value == "length":
        return "length"
    raise RequestAbortedError(f"request {request_id!r} was aborted by the engine ({value!r})")


def check_fits_context(request: GenerateRequest, capacity: EngineCapacity) -> None:
    """Raise :class:`PromptTooLongError` if the request cannot fit the model's context."""
    needed = len(request.prompt_token_ids) + request.max_tokens
    if needed > capacity.max_model_len_tokens:
        raise PromptTooLongError(
            f"request {request.request_id!r}: prompt of {len(request.prompt_token_ids)} tokens"
            f" plus max_tokens={request.max_tokens} exceeds the model context of"
            f" {capacity.max_model_len_tokens} tokens"
        )
