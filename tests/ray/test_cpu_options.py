"""``cpu_actor_options``: disjoint, contiguous slices of the host's cores, one per vLLM CPU
replica, as Ray's ``num_cpus`` and as vLLM's thread binding."""

from __future__ import annotations

import os

import pytest

from kalypso.ray.cpu import VLLM_CPU_BIND_ENV, cpu_actor_options


def _binds(options: list[dict[str, object]]) -> list[str]:
    return [o["runtime_env"]["env_vars"][VLLM_CPU_BIND_ENV] for o in options]  # type: ignore[index]


def test_slices_are_disjoint_contiguous_and_differ_by_at_most_one_core() -> None:
    options = cpu_actor_options(2, cores=[7, 3, 4, 5, 6])
    assert _binds(options) == ["3,4,5", "6,7"]
    assert [o["num_cpus"] for o in options] == [3, 2]
    assert _binds(cpu_actor_options(3, cores=range(6))) == ["0,1", "2,3", "4,5"]
    assert _binds(cpu_actor_options(1, cores=[2, 0])) == ["0,2"]


def test_the_default_is_the_cores_this_process_may_run_on() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    options = cpu_actor_options(1)
    assert _binds(options) == [",".join(map(str, allowed))]
    assert options[0]["num_cpus"] == len(allowed)


@pytest.mark.parametrize(
    ("count", "cores", "message"),
    [
        (0, [0, 1], "count must be 1 to 2"),
        (3, [0, 1], "count must be 1 to 2"),
        (1, [0, 0], "cores repeat one"),
        (1, [], "count must be 1 to 0"),
    ],
)
def test_bad_counts_and_cores_are_refused(count: int, cores: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cpu_actor_options(count, cores=cores)
