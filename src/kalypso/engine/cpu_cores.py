"""Which cores a vLLM CPU engine computes on.

vLLM's CPU backend binds an engine's compute threads to cores it picks itself
(``VLLM_CPU_OMP_THREADS_BIND=auto``): the cores of the first NUMA node less one kept for
the front end. Every engine started on a host picks the same ones, so engines started side
by side there (replicas) compute on the same cores while the rest stay idle.
:func:`core_slices` splits a host's cores into disjoint slices, one per engine, and
:func:`bound_to` starts an engine on its slice through the variable vLLM reads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

VLLM_CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""The variable vLLM's CPU backend reads for the cores an engine's threads run on."""


def allowed_cores() -> list[int]:
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def core_slices(count: int, cores: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """``count`` contiguous, disjoint slices of ``cores`` (default :func:`allowed_cores`),
    in order, differing in size by at most one core.

    Raises:
        ValueError: ``count`` is below 1 or above the number of cores, or ``cores``
            repeats one.
    """
    chosen = sorted(allowed_cores() if cores is None else cores)
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"cores repeat one: {chosen}")
    if not 1 <= count <= len(chosen):
        raise ValueError(
            f"count must be 1 to {len(chosen)} (a core an engine at least), got {count}"
        )
    slices: list[tuple[int, ...]] = []
    start = 0
    for n in range(count):
        size = len(chosen) // count + (1 if n < len(chosen) % count else 0)
        slices.append(tuple(chosen[start : start + size]))
        start += size
    return slices


def parse_cores(text: str) -> tuple[int, ...]:
    """Cores written as a command line takes them: ids and inclusive ranges separated by
    commas (``"0,2-3"`` is cores 0, 2 and 3), in order.

    Raises:
        ValueError: an empty item, a part that is not a core id, a range that runs
            backwards, or a core named twice.
    """
    cores: list[int] = []
    for item in text.split(","):
        first, dash, last = item.strip().partition("-")
        if not first.strip().isdigit() or (dash and not last.strip().isdigit()):
            raise ValueError(f"cores must be ids and ranges such as 0,2-3, got {text!r}")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"the range {item.strip()!r} runs backwards")
        cores.extend(range(low, high + 1))
    if len(set(cores)) != len(cores):
        raise ValueError(f"{text!r} names a core twice")
    return tuple(cores)


def bind_value(cores: Sequence[int]) -> str:
    """``cores`` as vLLM's binding variable writes them (``"0,1,2"``)."""
    return ",".join(map(str, cores))


def checked_bind_value(cores: Sequence[int]) -> str:
    """:func:`bind_value` of ``cores`` for an engine this process starts.

    Raises:
        ValueError: this process may not run on one of ``cores`` (vLLM would fail to
            start, later and less clearly).
    """
    allowed = allowed_cores()
    outside = sorted(set(cores) - set(allowed))
    if outside:
        raise ValueError(f"cpu_cores {outside} are not among this process's cores {allowed}")
    return bind_value(cores)


@contextlib.contextmanager
def bound_to(cores: Sequence[int] | None) -> Iterator[None]:
    """Within the block, vLLM engines started by this process compute on ``cores`` (None:
    no change). The variable is process-wide, so engines are started one at a time.

    Raises:
        ValueError: as :func:`checked_bind_value`, before anything changes.
    """
    if cores is None:
        yield
        return
    value = checked_bind_value(cores)
    before = os.environ.get(VLLM_CPU_BIND_ENV)
    os.environ[VLLM_CPU_BIND_ENV] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(VLLM_CPU_BIND_ENV, None)
        else:
            os.environ[VLLM_CPU_BIND_ENV] = before
