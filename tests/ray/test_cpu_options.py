"""``cpu_actor_options``: a slice of the host's cores per vLLM CPU replica
(``core_slices``, tested in ``tests/engine/test_cpu_cores.py``), as Ray's ``num_cpus`` and
as vLLM's thread binding."""

from __future__ import annotations

import os

import pytest

from kalypso.engine.cpu_cores import VLLM_CPU_BIND_ENV
from kalypso.ray.cpu import cpu_actor_options


def test_each_actor_gets_its_slice_as_num_cpus_and_as_the_binding() -> None:
    assert cpu_actor_options(2, cores=[7, 3, 4, 5, 6]) == [
        {"num_cpus": 3, "runtime_env": {"env_vars": {VLLM_CPU_BIND_ENV: "3,4,5"}}},
        {"num_cpus": 2, "runtime_env": {"env_vars": {VLLM_CPU_BIND_ENV: "6,7"}}},
    ]
    allowed = sorted(os.sched_getaffinity(0))
    assert cpu_actor_options(1)[0]["num_cpus"] == len(allowed)


def test_more_replicas_than_cores_are_refused() -> None:
    with pytest.raises(ValueError, match="count must be 1 to 2"):
        cpu_actor_options(3, cores=[0, 1])
