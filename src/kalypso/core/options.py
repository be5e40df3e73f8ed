"""One frozen set of run options, passed unchanged from the front end to the runner."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from kalypso.core.errors import PlanError
from kalypso.core.policies import Policy, PolicyError, get_policy

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful data analyst. Answer the question about the document that follows,"
    " briefly and exactly as asked."
)


def _check_int(name: str, value: Any, minimum: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_float(name: str, value: Any, *, positive: bool, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlanError(f"{name} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise PlanError(f"{name} must be > 0, got {value!r}")


RELATIONAL_POLICY = "adaptive"
"""The policy of a relational plan whose options choose none (Algorithm 1)."""
WORKFLOW_POLICY = "cache-aware"
"""The policy of a workflow whose options choose none (the Helium paper's section 5)."""

MIN_KV_OVERCOMMIT = 1.0
MAX_KV_OVERCOMMIT = 4.0


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan or a workflow.

    Attributes:
        policy: a policy name (``"adaptive"``, ``"static:0.3"``, ... see
            :mod:`kalypso.core.policies`) or a :class:`~kalypso.core.policies.Policy`;
            None (the default): the front end's own, ``adaptive`` for relational plans
            and ``cache-aware`` for workflows (:meth:`with_default_policy`).
        pinning: ``"virtual"`` (admission control alone keeps prefixes cached under LRU)
            or ``"explicit"`` (the engine pins each parent's blocks until its children are
            done; needs an engine with ``supports_pinning`` and a memory-aware policy:
            one that reserves nothing, such as ``operator-at-a-time`` or ``all-ready``,
            is refused).
        max_tasks_in_flight: optional cap on tasks running at once.
        kv_overcommit: admit calls against a ledger of this many times the engine's KV
            blocks, from 1.0 to 4.0. At 1.0 a memory-aware policy never reserves more than
            the cache holds, so the engine never preempts its calls. Above 1.0 more calls
            run at once and the engine's own preemption absorbs the excess: a preempted
            call recomputes its prompt, and an evicted shared prefix is recomputed by the
            next call that needs it. None (the default): the policy's choice, 1.0 except
            for a ``cache-aware`` workflow, which weighs the calls' mean occupancy by
            predicted time (:mod:`kalypso.core.ledger_size`; beside conversation groups
            a tie keeps 1.0); with explicit pinning, always 1.0. A
            ledger shared between runs (a replica's, a batch file's) admits against the
            least of its runs' factors. A number is refused with ``pinning="explicit"``
            above 1.0 (hard pins beyond the cache would hold it full) and with the job
            server's fair-sharing ledger unless 1.0; policies that reserve nothing are
            unaffected.
        max_continuations: a call stopped at its output bound is continued with its bound
            doubled, and continuation number ``max_continuations`` (or the first, with 0
            or 1) goes straight to the call's cap: at most ``max(1, max_continuations)``
            continuations per call.
        alpha, beta: Algorithm 1's saturation and starvation thresholds (0 < beta < alpha).
        estimate_bounds: learn generative calls' output bounds online (else their own).
        fixed_bound_tokens: one first output bound for every generative call.
        reserve_cap_when_it_fits: reserve a task's calls at their caps when its stage's
            free budget holds that (no call is then continued), the estimate only under
            memory pressure; off (or with a fixed bound, or without estimation, the
            paper's Figure 12 ablations) every generative call starts at its bound.
        call_timeout_s: a call not finished after this many seconds fails the run
            (:class:`~kalypso.engine.protocol.EngineTimeoutError`); None: the engine's own.
        isolate_call_errors: a call the engine fails (an
            :class:`~kalypso.engine.protocol.EngineError`: a timeout, a prompt too long,
            a refused request) does not fail the run: the call's outcome carries the
            error, with empty text, and everything else goes on. For front ends whose
            calls are independent requests (batch files); cancelling the run still stops
            everything.
        deadlock_check_s: with explicit pinning, how long without a completion before
            asking the engine whether pins hold it stuck; each check that finds it
            running doubles the wait, up to 8x.
        near_tie_margin: a decision whose log-probability margin is below this is a
            *near-tie*: reported, and exempt from the same-answers guarantee (bf16, or a
            different batch, may flip it).
        system_prompt: the system message of front ends that use one (queries).
        query_id: this run's id on the engine's ledger (unique among running runs).
        progress: show a live per-stage view on stderr.
        request_priority: added to every request's engine priority (lower is served
            first). Runs sharing an engine are ordered by it; the job server gives smaller
            jobs lower numbers, so a short job is not queued behind a long one's calls.
    """

    policy: str | Policy | None = None
    pinning: str = "virtual"
    max_tasks_in_flight: int | None = None
    kv_overcommit: float | None = None
    max_continuations: int = 2
    alpha: float = 1.0
    beta: float = 0.5
    estimate_bounds: bool = True
    fixed_bound_tokens: int | None = None
    reserve_cap_when_it_fits: bool = True
    call_timeout_s: float | None = 600.0
    isolate_call_errors: bool = False
    deadlock_check_s: float = 0.25
    near_tie_margin: float = 0.1
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    query_id: str | None = None
    progress: bool = False
    request_priority: int = 0

    def __post_init__(self) -> None:
        try:
            policy = self.resolved_policy()
        except PolicyError as exc:
            raise PlanError(str(exc)) from None
        if self.pinning not in ("virtual", "explicit"):
            raise PlanError(f"pinning must be 'virtual' or 'explicit', got {self.pinning!r}")
        if self.pinning == "explicit" and not policy.memory_aware:
            raise PlanError(
                f"pinning='explicit' needs a policy that reserves KV memory; {policy.name!r}"
                " reserves none, so its pins would fill the cache (use pinning='virtual')"
            )
        _check_int("max_tasks_in_flight", self.max_tasks_in_flight, 1, optional=True)
        _check_float("kv_overcommit", self.kv_overcommit, positive=True, optional=True)
        if self.kv_overcommit is not None and not (
            MIN_KV_OVERCOMMIT <= self.kv_overcommit <= MAX_KV_OVERCOMMIT
        ):
            raise PlanError(
                f"kv_overcommit must be in [{MIN_KV_OVERCOMMIT}, {MAX_KV_OVERCOMMIT}],"
                f" got {self.kv_overcommit!r}"
            )
        overcommitted = self.kv_overcommit is not None and self.kv_overcommit > 1.0
        if overcommitted and self.pinning == "explicit":
            raise PlanError(
                f"kv_overcommit={self.kv_overcommit} with pinning='explicit': pins reserved"
                " beyond the cache would hold it full (use pinning='virtual')"
            )
        _check_int("max_continuations", self.max_continuations, 0)
        if isinstance(self.request_priority, bool) or not isinstance(self.request_priority, int):
            raise PlanError(f"request_priority must be an integer, got {self.request_priority!r}")
        _check_int("fixed_bound_tokens", self.fixed_bound_tokens, 1, optional=True)
        _check_float("alpha", self.alpha, positive=True)
        _check_float("beta", self.beta, positive=True)
        if not 0 < self.beta < self.alpha:
            raise PlanError(f"need 0 < beta < alpha, got beta={self.beta}, alpha={self.alpha}")
        _check_float("call_timeout_s", self.call_timeout_s, positive=True, optional=True)
        _check_float("deadlock_check_s", self.deadlock_check_s, positive=True)
        _check_float("near_tie_margin", self.near_tie_margin, positive=False)
        if self.near_tie_margin < 0:
            raise PlanError(f"near_tie_margin must be >= 0, got {self.near_tie_margin}")
        if not isinstance(self.system_prompt, str):
            raise PlanError(f"system_prompt must be a string, got {self.system_prompt!r}")
        if self.query_id is not None and (not isinstance(self.query_id, str) or not self.query_id):
            raise PlanError(f"query_id must be a non-empty string, got {self.query_id!r}")
        for name in ("estimate_bounds", "progress", "reserve_cap_when_it_fits"):
            if not isinstance(getattr(self, name), bool):
                raise PlanError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def with_default_policy(self, name: str) -> RunOptions:
        """These options, with policy ``name`` if none was chosen (a front end's own)."""
        return self if self.policy is not None else replace(self, policy=name)

    def resolved_policy(self) -> Policy:
        """A fresh policy object for one run (:data:`RELATIONAL_POLICY` if none was
        chosen)."""
        return get_policy(RELATIONAL_POLICY if self.policy is None else self.policy)


def run_options(
    options: RunOptions | None, option_values: dict[str, Any], **defaults: Any
) -> RunOptions:
    """A front end's options: ``options`` as given, or built from its keyword fields
    ``option_values`` over ``defaults``.

    Raises:
        PlanError: both given, an unknown field, or ``options`` not a :class:`RunOptions`.
    """
    if options is None:
        try:
            options = RunOptions(**{**defaults, **option_values})
        except TypeError as exc:
            raise PlanError(f"arun: {exc}") from None
    elif option_values:
        raise PlanError(
            f"pass either options= or keyword options, not both: {sorted(option_values)}"
        )
    if not isinstance(options, RunOptions):
        raise PlanError(f"options must be a RunOptions, got {options!r}")
    return options
