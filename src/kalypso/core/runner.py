"""The async runner: drives a :class:`~kalypso.core.scheduler.SchedulerCore` against an
engine, one pipeline at a time.

::

    start programs -> core.schedule() --admitted--> task coroutines (TaskGroup)
         ^                                             | engine.generate / Python steps
         '---- core.update_from_output(outcomes) <-----'  (outcomes through a queue)

Each admitted task runs its program (:mod:`kalypso.core.program`) to the end of its
stage: LLM calls go to the engine with the bound, priority and pin key the core chose;
Python steps run inline, or in a thread when marked blocking. A call that stops at its
output bound ends the task's turn with a ``Grow``; the core re-admits it with a larger
reservation and the next request *continues* the call (its prompt plus the tokens
generated so far).

Nothing outlives a failed or cancelled run: on any exception (an engine error, a timeout,
a Python step that raised, cancellation of the caller) every running task is cancelled
(which aborts its request in the engine), every block the run holds in the ledger is
released and its pins are unpinned, and the error is raised as
:class:`~kalypso.core.errors.TaskFailed` (or the cancellation propagates).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from kalypso.core.bounds import BoundPolicy
from kalypso.core.errors import PlanError, TaskFailed
from kalypso.core.estimator import TokenBoundEstimator
from kalypso.core.graph import LLMNode
from kalypso.core.hooks import CallSite, RunHooks
from kalypso.core.ideal_cache import IdealPrefixCache
from kalypso.core.instance import CallOutcome, Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.options import RunOptions
from kalypso.core.policies import Policy
from kalypso.core.program import (
    CallStep,
    FnStep,
    ProgramContext,
    RunnableProgram,
    TaskProgram,
)
from kalypso.core.prompt import ChatLayout, Prompt
from kalypso.core.report import PipelineReport, StageView
from kalypso.core.result_cache import PromptResultCache
from kalypso.core.scheduler import CoreSettings, Grow, SchedulerCore, Task, TaskOutcome
from kalypso.core.stats import OperatorStats
from kalypso.engine.protocol import (
    Engine,
    EngineCapacity,
    EngineDeadError,
    EngineError,
    EngineTimeoutError,
    GenerateRequest,
    GenerateResult,
    host_work,
)

logger = logging.getLogger(__name__)

MAX_CHECK_DOUBLINGS = 3
"""The wait between deadlock checks that find the engine running doubles up to 8x
``deadlock_check_s`` (2 s by default): each check reads the engine's metrics, which on a
vLLM server is a ``/metrics`` scrape sharing the CPU with the model."""

OnUpdate = Callable[[list[StageView]], None]


@dataclass
class RunState:
    """What one run (a query or a workflow batch) shares across its pipelines."""

    engine: Engine
    layout: ChatLayout
    ledger: KVLedger
    options: RunOptions
    owner: str
    bounds: BoundPolicy
    stats: dict[str, OperatorStats]
    ideal_cache: IdealPrefixCache
    decisions: list[tuple[str, tuple[int, ...], str, float]] = field(default_factory=list)
    """``(op_id, instance key, choice, margin)`` of every constrained decision."""
    result_cache: PromptResultCache | None = None
    """Greedy answers reused instead of recomputed (workflows; None: off)."""
    hooks: RunHooks = field(default_factory=RunHooks)
    """The host's journal of calls and progress listener (:mod:`kalypso.core.hooks`)."""
    ledger_factor: float = 1.0
    """How many times the engine's blocks this run asks its ledger to admit against
    (:meth:`KVLedger.register`)."""

    @classmethod
    def create(
        cls,
        engine: Engine,
        options: RunOptions,
        owner: str,
        ledger: KVLedger | None,
        policy: Policy,
        layout: ChatLayout | None = None,
        *,
        result_cache: PromptResultCache | None = None,
        hooks: RunHooks | None = None,
    ) -> RunState:
        """The run's state; ``ledger`` is one shared with other runs, or None for a ledger
        of its own, of the engine's blocks. The run asks its ledger to admit against
        ``options.kv_overcommit`` times its capacity (None: the prepared ``policy``'s
        ``ledger_factor``, or 1.0 with explicit pinning); a ledger shared with other runs
        admits against the least of their factors (:meth:`register_owner`). Its output
        bounds follow ``policy`` (bounded or at the cap) and ``options`` (the estimator, a
        fixed first bound); without ``hooks``, no journal and no listener.

        Raises:
            PlanError: an overcommitted ledger asked for with a fair-sharing one (the job
                server's), which always admits against the cache.
        """
        if ledger is not None and ledger.fair_share and options.kv_overcommit not in (None, 1.0):
            raise PlanError(
                f"kv_overcommit={options.kv_overcommit} with a fair-sharing ledger: it shares"
                f" the engine's {ledger.capacity_blocks} blocks between its runs by priority"
            )
        factor = options.kv_overcommit
        if factor is None:
            factor = policy.ledger_factor if options.pinning == "virtual" else 1.0
        bounds = BoundPolicy(
            bounded=policy.bounded_outputs,
            estimator=TokenBoundEstimator() if options.estimate_bounds else None,
            fixed_bound_tokens=options.fixed_bound_tokens,
        )
        return cls(
            engine=engine,
            layout=layout or ChatLayout(engine.tokenizer),
            ledger=ledger or KVLedger(engine.capacity.num_blocks),
            options=options,
            owner=owner,
            bounds=bounds,
            stats={},
            ideal_cache=IdealPrefixCache(engine.capacity.block_size_tokens),
            result_cache=result_cache,
            hooks=hooks if hooks is not None else RunHooks(),
            ledger_factor=factor,
        )

    def register_owner(self) -> None:
        """Register this run in its ledger, with its priority and its ledger factor.

        Raises:
            ValueError: a run of this owner is already registered there.
        """
        self.ledger.register(self.owner, self.options.request_priority, self.ledger_factor)

    def stats_for(self, op_id: str) -> OperatorStats:
        return self.stats.setdefault(op_id, OperatorStats(op_id))

    def cache_tokens(self) -> tuple[int, int]:
        """Prompt tokens found cached so far, and all prompt tokens sent (a progress
        view's hit rate)."""
        return (
            sum(s.cached_tokens for s in self.stats.values()),
            sum(s.prompt_tokens for s in self.stats.values()),
        )

    def program_context(self) -> ProgramContext:
        """What the run's programs share; conversations are held for their continuations
        only under explicit pins, by a policy that asks for it (see
        :attr:`~kalypso.core.policies.base.Policy.holds_continued_prefixes`)."""
        holds = self.options.resolved_policy().holds_continued_prefixes
        return ProgramContext(
            self.layout,
            self.engine.capacity.block_size_tokens,
            self.stats_for,
            hold_continued_prefixes=holds and self.options.pinning == "explicit",
        )


def decision_token_ids(node: LLMNode, layout: ChatLayout) -> dict[int, str]:
    """The allowed first token of each of a decision's choices (they must differ)."""
    assert node.decision is not None
    by_token: dict[int, str] = {}
    for choice in node.decision.choices:
        ids = layout.text_ids(choice)
        if not ids or ids[0] in by_token:
            other = by_token.get(ids[0]) if ids else None
            raise ValueError(
                f"[{node.op_id}] choices {other!r} and {choice!r} start with the same token;"
                " one-token decisions need choices that differ in their first token"
            )
        by_token[ids[0]] = choice
    return by_token


def read_decision(node: LLMNode, layout: ChatLayout, result: GenerateResult) -> tuple[str, float]:
    """The choice a constrained call made, and its margin (log p(chosen) minus the best
    other choice's; +inf when the engine reported no other candidate)."""
    by_token = decision_token_ids(node, layout)
    if not result.output_token_ids or result.output_token_ids[0] not in by_token:
        raise RuntimeError(
            f"[{node.op_id}] the engine ignored the decision's allowed tokens"
            f" (generated {result.output_token_ids[:4]})"
        )
    chosen = result.output_token_ids[0]
    if not result.logprobs:
        return by_token[chosen], math.inf
    position = dict(result.logprobs[0])
    mine = position.get(chosen)
    others = [lp for token, lp in position.items() if token != chosen and token in by_token]
    if mine is None or not others:
        return by_token[chosen], math.inf
    return by_token[chosen], mine - max(others)


def _in_flight_cap(options: RunOptions, policy: Policy, capacity: EngineCapacity) -> int | None:
    """The run's cap on tasks in flight: ``max_tasks_in_flight`` when set, else the
    engine's ``max_running_requests`` for a policy paced by the engine, else none."""
    if options.max_tasks_in_flight is not None:
        return options.max_tasks_in_flight
    return capacity.max_running_requests if policy.paced_by_engine else None


def runnable(task: Task) -> RunnableProgram:
    """The task's program, which the runner can step through."""
    program = task.program
    if not hasattr(program, "next_step"):
        raise TypeError(f"the runner cannot step a {type(program).__name__}")
    return program  # type: ignore[return-value]


class PipelineRunner:
    """Runs one pipeline of ``num_stages`` stages (joined by fan-outs, or the depths of a
    DAG) on its first tasks' programs."""

    def __init__(
        self,
        state: RunState,
        num_stages: int,
        on_update: OnUpdate | None = None,
        policy: Policy | None = None,
    ) -> None:
        """``policy``: one already prepared for this run (a ranked policy's order is built
        in :meth:`~kalypso.core.policies.base.Policy.prepare`); None: a fresh one of the
        run's options, unprepared."""
        self.state = state
        self.on_update = on_update
        options = state.options
        policy = policy or options.resolved_policy()
        self.core = SchedulerCore(
            num_stages,
            state.ledger,
            state.owner,
            policy,
            state.bounds,
            state.engine.capacity.block_size_tokens,
            CoreSettings(
                alpha=options.alpha,
                beta=options.beta,
                max_running_tasks=_in_flight_cap(options, policy, state.engine.capacity),
                explicit_pinning=options.pinning == "explicit",
                max_continuations=options.max_continuations,
                cap_when_it_fits=options.reserve_cap_when_it_fits
                and options.fixed_bound_tokens is None
                and options.estimate_bounds,
            ),
        )
        self._requests = 0
        self._busy_checks = 0
        """Deadlock checks in a row that found the engine running: each doubles the wait
        before the next (up to :data:`MAX_CHECK_DOUBLINGS`)."""

    @property
    def report(self) -> PipelineReport:
        return self.core.report

    @property
    def policy(self) -> Policy:
        return self.core.policy

    async def run(self, programs: Sequence[TaskProgram]) -> list[Instance]:
        """Run the pipeline; returns its output instances ordered by key.

        Raises:
            TaskFailed: a task failed (everything the run held is released first).
        """
        core = self.core
        core.start(programs)
        done: asyncio.Queue[TaskOutcome] = asyncio.Queue()
        link = self.state.hooks.chunk
        if link is not None:  # a replica set may take back instances not yet started
            link.attach(core)
        try:
            async with asyncio.TaskGroup() as group:
                while core.has_work:
                    out = core.schedule()
                    await self._unpin(out.unpin)
                    for task in out.admitted:
                        group.create_task(self._run_task(task, done))
                    if not core.running:
                        # other runs hold the ledger: wait until one releases
                        await self.state.ledger.wait_for_release(timeout_s=1.0)
                        continue
                    outcomes = await self._next_outcomes(done)
                    if outcomes:
                        core.update_from_output(outcomes)
                        if self.on_update is not None:
                            self.on_update(core.views())
        except BaseExceptionGroup as group_error:
            raise _first_error(group_error) from None
        finally:
            if link is not None:
                link.detach(core)
            if core.has_work or core.running:
                await self._abort()
        await self._unpin(core.schedule().unpin if core.memory else [])
        return core.finish()

    async def _next_outcomes(self, done: asyncio.Queue[TaskOutcome]) -> list[TaskOutcome]:
        """Wait for the next finished task, and take every other finished one with it."""
        pins_possible = self.core.pinning or self.core.pins_in_flight
        timeout = None
        if pins_possible:
            doublings = min(self._busy_checks, MAX_CHECK_DOUBLINGS)
            timeout = self.state.options.deadlock_check_s * 2**doublings
        try:
            async with asyncio.timeout(timeout):
                first = await done.get()
        except TimeoutError:
            deadlocked = await self._check_deadlock()
            self._busy_checks = 0 if deadlocked else self._busy_checks + 1
            return []
        outcomes = [first]
        while not done.empty():
            outcomes.append(done.get_nowait())
        return outcomes

    async def _check_deadlock(self) -> bool:
        """Explicit pins can hold the memory a waiting request needs while the tasks that
        would release them wait for it: the engine then has waiting requests and none
        running. Release every pin and continue with virtual pinning; returns whether it
        did."""
        stalled = await self.state.engine.stalled_requests()
        if stalled:
            stats = await self.state.engine.stats()
            ledger = self.state.ledger
            logger.info(
                "%s: pins deadlocked the engine (%d waiting, none running, KV %.1f%% used;"
                " ledger %d/%d blocks, %d of this run's tasks in flight); unpinning all",
                self.state.owner,
                stalled,
                100 * stats.kv_usage_fraction,
                ledger.reserved_blocks,
                ledger.capacity_blocks,
                len(self.core.running),
            )
            self.core.stop_pinning()
            await self.state.engine.unpin_all()
            return True
        return False

    async def _unpin(self, keys: Sequence[str]) -> None:
        """Release ``keys`` before the calls admitted into the room they free are sent:
        a call that reached vLLM first would wait beside the pins, and a deadlock check
        then could take it for a deadlock and unpin everything. Sent together, since vLLM
        answers each only after its next engine step (one at a time they cost a step
        each)."""
        if keys:
            await asyncio.gather(*(self.state.engine.unpin(key) for key in keys))

    async def _abort(self) -> None:
        keys = self.core.abort()
        for key in keys:
            with contextlib.suppress(Exception):
                await self.state.engine.unpin(key)

    # ---- one task ------------------------------------------------------------------
    async def _run_task(self, task: Task, done: asyncio.Queue[TaskOutcome]) -> None:
        program = runnable(task)
        op_id = ""
        try:
            while (step := program.next_step()) is not None:
                op_id = step.node.op_id
                if isinstance(step, FnStep):
                    if step.node.blocking:
                        with host_work(self.state.engine):
                            await asyncio.to_thread(program.run_fn, step)
                    else:
                        program.run_fn(step)
                    continue
                grow = await self._call(task, step)
                if grow is not None:
                    done.put_nowait(TaskOutcome(task, grow))
                    return
            if getattr(program, "expands_off_loop", False):
                op_id = "fan-out"
                with host_work(self.state.engine):
                    await asyncio.to_thread(program.prepare_children)  # type: ignore[attr-defined]
        except (asyncio.CancelledError, TaskFailed):
            raise
        except Exception as exc:
            raise TaskFailed(op_id or "?", task.key, exc) from exc
        done.put_nowait(TaskOutcome(task))

    async def _generate(
        self, site: CallSite, request: GenerateRequest
    ) -> tuple[GenerateResult, bool]:
        """``engine.generate`` through the run's journal and the result cache (when on),
        with a backstop: every engine enforces ``timeout_s`` itself (and aborts the
        request); an engine that does not is cut off a little later. Returns the result and
        whether the journal or the result cache answered it (the engine then computed
        nothing). A call the engine answered is journaled before it is returned."""
        journal = self.state.hooks.journal
        if journal is not None and (recorded := await journal.lookup(site, request)) is not None:
            return replace(recorded, request_id=request.request_id), True
        cache = self.state.result_cache
        if cache is not None and (cached := cache.get(request)) is not None:
            return cached, True
        result = await self._send(request)
        if cache is not None:
            cache.put(request, result)
        if journal is not None:
            await journal.record(site, request, result)
        return result, False

    async def _send(self, request: GenerateRequest) -> GenerateResult:
        """Send ``request`` in one of the ledger's call slots; a call preempted there (a
        more urgent owner wants the engine) is aborted and sent again, under a new id,
        once the run may call. The result carries ``request``'s id."""
        ledger = self.state.ledger
        if not ledger.fair_share:  # nothing preempts: no race to set up on each call
            async with ledger.call_slot(self.state.owner):
                return await self._generate_in_time(request)
        attempt = request
        for resend in itertools.count(1):
            async with ledger.call_slot(self.state.owner) as slot:
                sending = asyncio.ensure_future(self._generate_in_time(attempt))
                preempted = asyncio.ensure_future(slot.preempted.wait())
                try:
                    await asyncio.wait((sending, preempted), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    preempted.cancel()
                    cut_off = not sending.done()
                    if cut_off:
                        sending.cancel()  # the engine aborts the request
                        with contextlib.suppress(asyncio.CancelledError, EngineError):
                            await sending
            if not cut_off:
                return replace(sending.result(), request_id=request.request_id)
            logger.debug("%s: %r preempted, to be sent again", self.state.owner, attempt.request_id)
            attempt = replace(request, request_id=f"{request.request_id}~{resend}")
        raise AssertionError("unreachable")

    async def _generate_in_time(self, request: GenerateRequest) -> GenerateResult:
        """``engine.generate``, cut off a little after ``timeout_s`` if the engine does
        not enforce it itself."""
        if request.timeout_s is None:
            return await self.state.engine.generate(request)
        try:
            async with asyncio.timeout(request.timeout_s + BACKSTOP_GRACE_S):
                return await self.state.engine.generate(request)
        except TimeoutError:
            raise EngineTimeoutError(
                f"request {request.request_id!r} did not finish in {request.timeout_s} s"
            ) from None

    async def _call(self, task: Task, step: CallStep) -> Grow | None:
        state = self.state
        node = step.node
        program = runnable(task)
        assert program.instance is not None
        instance = program.instance
        bound = task.bounds.get(node.op_id) or state.bounds.first_bound(
            node, step.prompt.length_tokens
        )
        prompt_ids = step.prompt.ids + step.generated
        decision_ids = decision_token_ids(node, state.layout) if node.decision else None
        self._requests += 1
        where = ".".join(map(str, instance.key))
        request = GenerateRequest(
            request_id=f"{state.owner}:{node.op_id}:{where}:{self._requests}",
            prompt_token_ids=prompt_ids,
            max_tokens=1 if decision_ids else bound - len(step.generated),
            priority=task.priority + state.options.request_priority,
            greedy=node.greedy,
            temperature=node.temperature,
            top_p=node.top_p,
            seed=node.seed,
            stop=node.stop,
            pin_key=task.pin_key,
            pin_blocks=task.pin_blocks,
            pin_soft=task.pin_soft,
            allowed_token_ids=tuple(decision_ids) if decision_ids else None,
            logprobs=len(decision_ids) if decision_ids else node.logprobs,
            timeout_s=state.options.call_timeout_s,
        )
        stats = state.stats_for(node.op_id)
        expected = program.expected_cached_tokens(Prompt.from_ids(state.layout, prompt_ids))
        least = state.ideal_cache.measure(prompt_ids)
        try:
            result, from_result_cache = await self._generate((node.op_id, instance.key), request)
        except EngineError as exc:
            if not state.options.isolate_call_errors or isinstance(exc, EngineDeadError):
                raise
            logger.info("%s failed, isolated: %s", request.request_id, exc)
            stats.failed_calls += 1
            error = f"{type(exc).__name__}: {exc}"
            program.on_call_result(CallOutcome("", (), "error", step.prompt.ids, error=error))
            return None
        state.ideal_cache.remember(
            prompt_ids + result.output_token_ids, len(prompt_ids), least.chain_key
        )
        instance.last_prompt = prompt_ids
        stats.record(
            result,
            continuation=bool(step.generated),
            expected_cached_tokens=expected,
            min_prefill_tokens=least.prefill_tokens,
            min_attention_pairs=least.attention_pairs,
            from_result_cache=from_result_cache,
        )
        generated = step.generated + result.output_token_ids
        if decision_ids is None and result.finish_reason == "length" and bound < node.max_tokens:
            program.hold_partial(generated)
            return Grow(node.op_id, bound, node.max_tokens)
        stats.calls += 1
        state.bounds.observe(node, step.prompt.length_tokens, len(generated))
        if decision_ids:
            choice, margin = read_decision(node, state.layout, result)
            stats.decisions += 1
            state.decisions.append((node.op_id, instance.key, choice, margin))
            if margin < state.options.near_tie_margin:
                stats.near_ties += 1
            outcome = CallOutcome(
                choice,
                generated,
                result.finish_reason,
                step.prompt.ids,
                choice,
                margin,
                from_result_cache=from_result_cache,
            )
        else:
            text = result.text if not step.generated else state.engine.tokenizer.decode(generated)
            outcome = CallOutcome(
                text,
                generated,
                result.finish_reason,
                step.prompt.ids,
                from_result_cache=from_result_cache,
                logprobs=tuple(zip(result.token_logprobs, result.logprobs, strict=False))
                if node.logprobs is not None
                else (),
            )
        program.on_call_result(outcome)
        return None


BACKSTOP_GRACE_S = 5.0
"""How long past a call's timeout the runner waits for an engine that does not enforce it."""


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a TaskGroup ended with (the first task's), others logged."""
    errors = list(group.exceptions)
    for extra in errors[1:]:
        logger.debug("another task failed too: %r", extra)
    first = errors[0]
    if isinstance(first, BaseExceptionGroup):
        return _first_error(first)
    return first
