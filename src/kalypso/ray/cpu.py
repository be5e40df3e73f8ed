"""Cores of their own for vLLM CPU replicas on one host.

vLLM's CPU backend binds an engine's compute threads to cores it picks itself
(``VLLM_CPU_OMP_THREADS_BIND=auto``): the cores of the first NUMA node less one kept for
the front end. Every engine started on a host picks the same ones, so replicas started
side by side there compute on the same cores and the rest stay idle. Ray's ``num_cpus``
only counts cores, it does not bind them. :func:`cpu_actor_options` gives each replica's
actor a disjoint slice of the host's cores through the variable vLLM reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

VLLM_CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""The variable vLLM's CPU backend reads for the cores an engine's threads run on."""


def cpu_actor_options(count: int, cores: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Ray actor options for ``count`` vLLM CPU replicas on this host, one dict per actor
    (for ``start_replicas(..., actor_options=...)``): actor ``n`` gets the ``n``-th of
    ``count`` contiguous, disjoint slices of ``cores`` (default: the cores this process
    may run on), as ``num_cpus`` and as its engine's thread binding. Slices differ in size
    by at most one core.

    For a cluster of this one host (``ray.init()`` here); on other nodes the cores of this
    one mean nothing.

    Raises:
        ValueError: ``count`` is below 1 or above the number of cores, or ``cores``
            repeats one.
    """
    chosen = sorted(os.sched_getaffinity(0) if cores is None else cores)
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"cores repeat one: {chosen}")
    if not 1 <= count <= len(chosen):
        raise ValueError(
            f"count must be 1 to {len(chosen)} (a core a replica at least), got {count}"
        )
    options: list[dict[str, Any]] = []
    start = 0
    for n in range(count):
        size = len(chosen) // count + (1 if n < len(chosen) % count else 0)
        share = chosen[start : start + size]
        start += size
        options.append(
            {
                "num_cpus": len(share),
                "runtime_env": {"env_vars": {VLLM_CPU_BIND_ENV: ",".join(map(str, share))}},
            }
        )
    return options
