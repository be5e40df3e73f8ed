"""A trace of vLLM's engine steps, written by a scheduler subclass loaded through
``scheduler_cls``: where a run's engine time goes, step by step.

``VLLMSettings(scheduler_cls=STEP_TRACE_SCHEDULER_CLS)`` (or ``--scheduler-cls`` for a
server), with the environment variable :data:`STEP_TRACE_ENV_VAR` naming a file in the
engine's environment, makes vLLM's stock scheduler append one JSON line per engine step
to that file:

- ``scheduled_s`` and ``done_s``: ``time.monotonic()`` in the engine process when the
  step was scheduled and when its output came back (the clock is the machine's, so a
  client on the same machine can compare it with its own ``time.monotonic()``);
- ``prefill_tokens`` and ``decode_tokens``: the step's scheduled tokens that were prompt
  tokens and those that were generated ones (:func:`split_scheduled_tokens`);
- ``requests``: the requests the step ran; ``context_tokens``: the tokens those requests
  had already computed or found cached before the step; ``attention_pairs``: the
  query-key pairs the step's attention computes, each scheduled token against itself and
  every earlier token of its request
  (:func:`kalypso.engine.attention.attention_pairs`);
- ``running`` and ``waiting``: vLLM's queues after scheduling.

Without the variable the scheduler is vLLM's, unchanged. Scheduling is exactly vLLM's in
both cases: the subclass only reads. A step's engine time is its ``done_s`` minus the
later of its ``scheduled_s`` and the previous step's ``done_s``, which holds whether or
not vLLM schedules the next step while one runs (async scheduling).

vLLM internals relied on (vLLM 0.32): ``Scheduler.schedule`` /
``update_from_output``, ``SchedulerOutput.num_scheduled_tokens``, ``Scheduler.requests``,
``Request.num_computed_tokens`` / ``num_prompt_tokens``, ``Scheduler.running`` /
``waiting``. Importing this module does not import vLLM.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from kalypso.engine.attention import attention_pairs

if TYPE_CHECKING:
    from vllm.v1.core.sched.scheduler import Scheduler

STEP_TRACE_SCHEDULER_CLS = "kalypso.engine.vllm_step_trace.StepTraceScheduler"
"""The ``scheduler_cls`` value that writes the step trace."""

STEP_TRACE_ENV_VAR = "KALYPSO_STEP_TRACE"
"""The environment variable naming the file the trace is appended to."""


def split_scheduled_tokens(
    scheduled_tokens: int, computed_after_tokens: int, prompt_tokens: int
) -> tuple[int, int]:
    """``(prefill, decode)``: how many of a request's ``scheduled_tokens`` in one step are
    prompt tokens and how many are generated ones, given the tokens it has computed once
    the step is scheduled (vLLM advances ``num_computed_tokens`` at scheduling) and its
    prompt length. The two always sum to ``scheduled_tokens``.

    Raises:
        ValueError: a count is negative, or more were scheduled than are computed.
    """
    if min(scheduled_tokens, computed_after_tokens, prompt_tokens) < 0:
        raise ValueError("token counts cannot be negative")
    if scheduled_tokens > computed_after_tokens:
        raise ValueError(
            f"{scheduled_tokens} tokens scheduled but only {computed_after_tokens} computed"
        )
    computed_before_tokens = computed_after_tokens - scheduled_tokens
    prefill = min(scheduled_tokens, max(0, prompt_tokens - computed_before_tokens))
    return prefill, scheduled_tokens - prefill


def _build() -> type[Scheduler]:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler

    class StepTraceScheduler(Scheduler):
        """vLLM's scheduler, appending one JSON line per engine step to the file that
        :data:`STEP_TRACE_ENV_VAR` names (nothing when it is unset)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            path = os.environ.get(STEP_TRACE_ENV_VAR)
            self._trace = open(path, "a", buffering=1) if path else None  # noqa: SIM115
            self._pending: dict[int, dict[str, Any]] = {}

        def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
            output = super().schedule(*args, **kwargs)
            if self._trace is None or not output.num_scheduled_tokens:
                return output
            prefill = decode = context = pairs = 0
            for request_id, tokens in output.num_scheduled_tokens.items():
                request = self.requests[request_id]
                p, d = split_scheduled_tokens(
                    tokens, request.num_computed_tokens, request.num_prompt_tokens
                )
                prefill, decode = prefill + p, decode + d
                before = request.num_computed_tokens - tokens
                context += before
                pairs += attention_pairs(tokens, before)
            self._pending[id(output)] = {
                "scheduled_s": time.monotonic(),
                "prefill_tokens": prefill,
                "decode_tokens": decode,
                "requests": len(output.num_scheduled_tokens),
                "context_tokens": context,
                "attention_pairs": pairs,
                "running": len(self.running),
                "waiting": len(self.waiting),
            }
            return output

        def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            step = self._pending.pop(id(scheduler_output), None)
            if step is not None and self._trace is not None:
                step["done_s"] = time.monotonic()
                self._trace.write(json.dumps(step) + "\n")
            return outputs

        def shutdown(self) -> None:
            if self._trace is not None:
                self._trace.close()
                self._trace = None
            super().shutdown()

    StepTraceScheduler.__module__ = __name__
    StepTraceScheduler.__qualname__ = "StepTraceScheduler"
    return StepTraceScheduler


def __getattr__(name: str) -> Any:
    if name == "StepTraceScheduler":
        cls = _build()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
