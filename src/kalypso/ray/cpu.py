"""Cores of their own for vLLM CPU replicas on one host (see
:mod:`kalypso.engine.cpu_cores`): Ray's ``num_cpus`` only counts cores, it does not bind
them, so replicas' actors would compute on the same cores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kalypso.engine.cpu_cores import VLLM_CPU_BIND_ENV, bind_value, core_slices


def cpu_actor_options(count: int, cores: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Ray actor options for ``count`` vLLM CPU replicas on this host, one dict per actor
    (for ``start_replicas(..., actor_options=...)``): actor ``n`` gets the ``n``-th of
    :func:`~kalypso.engine.cpu_cores.core_slices` of ``cores`` (default: the cores this
    process may run on), as ``num_cpus`` and as its engine's thread binding.

    For a cluster of this one host (``ray.init()`` here); on other nodes the cores of this
    one mean nothing.

    Raises:
        ValueError: ``count`` is below 1 or above the number of cores, or ``cores``
            repeats one.
    """
    return [
        {
            "num_cpus": len(share),
            "runtime_env": {"env_vars": {VLLM_CPU_BIND_ENV: bind_value(share)}},
        }
        for share in core_slices(count, cores)
    ]
