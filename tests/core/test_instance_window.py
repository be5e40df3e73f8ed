"""The instance window's sizes, worked by hand: levels, an instance's peak working set
(shared full blocks once, each call's tail and output), the window, and who it admits."""

from __future__ import annotations

import pytest

from kalypso.core.cost import CallCost
from kalypso.core.instance_window import InstancePeak, InstanceWindow, instance_peak, llm_levels


def test_levels_follow_the_deepest_ancestor() -> None:
    ancestors = {"a": set(), "b": set(), "c": {"a"}, "d": {"a", "b", "c"}}
    assert llm_levels(ancestors) == {"a": 0, "b": 0, "c": 1, "d": 2}


def _calls() -> tuple[list[CallCost], list[tuple[str, tuple[int, ...]]]]:
    """Blocks of 4 tokens. Level 0: ``a`` (10 tokens: 2 full blocks, out 3 -> 4 blocks)
    and ``b`` (its first 8 tokens are a's, 11 tokens, out 1 -> 3 blocks): 2 shared + 2 + 1
    = 5. Level 1: ``c`` (20 tokens, out 4 -> 6 blocks) = 6. A second query whose ``a``
    and ``b`` share nothing: 2 + 2 + 2 + 1 = 7."""
    a = CallCost("a", tuple(range(10)), 3)
    b = CallCost("b", (*range(8), 9, 9, 9), 1)
    c = CallCost("c", tuple(range(100, 120)), 4, (0, 1))
    a2 = CallCost("a", tuple(range(200, 210)), 3)
    b2 = CallCost("b", tuple(range(300, 311)), 1)
    sites = [("a", (0,)), ("b", (0,)), ("c", (0,)), ("a", (1,)), ("b", (1,))]
    return [a, b, c, a2, b2], sites


def test_the_peak_counts_shared_full_blocks_once_per_instance_and_level() -> None:
    calls, sites = _calls()
    levels = {"a": 0, "b": 0, "c": 1}
    # the mean is over every (instance, level): 5 and 6 blocks, then 5, 6 and 7
    assert instance_peak(calls[:3], sites[:3], levels, 4) == InstancePeak(6, 1, 5.5)
    assert instance_peak(calls, sites, levels, 4) == InstancePeak(7, 2, 6.0)


def test_a_block_shared_only_in_part_is_not_shared() -> None:
    """Same tokens in the second block but not the first: a different chained key."""
    one = CallCost("a", (1, 2, 3, 4, 5, 6, 7, 8), 0)
    two = CallCost("b", (9, 2, 3, 4, 5, 6, 7, 8), 0)
    sites = [("a", (0,)), ("b", (0,))]
    assert instance_peak([one, two], sites, {"a": 0, "b": 0}, 4) == InstancePeak(4, 2)


def test_peak_refuses_a_bad_block_size_unmatched_sites_and_no_calls() -> None:
    calls, sites = _calls()
    levels = {"a": 0, "b": 0, "c": 1}
    with pytest.raises(ValueError, match="block size"):
        instance_peak(calls, sites, levels, 0)
    with pytest.raises(ValueError, match="sites"):
        instance_peak(calls, sites[:2], levels, 4)
    with pytest.raises(ValueError, match="sites"):
        instance_peak([], [], levels, 4)


@pytest.mark.parametrize(
    ("capacity_blocks", "peak", "groups"),
    [(44, 26, 2), (44, 22, 2), (44, 21, 3), (96, 26, 4), (44, 43, 2), (44, 44, None)],
)
def test_the_window_fills_the_cache_at_the_peak(
    capacity_blocks: int, peak: int, groups: int | None
) -> None:
    window = InstanceWindow.sized(capacity_blocks, InstancePeak(peak, 3), 16)
    assert window.groups == groups
    assert InstanceWindow.sized(capacity_blocks, InstancePeak(peak, 3)).groups == groups


@pytest.mark.parametrize(
    ("max_running_requests", "groups"), [(16, 2), (6, 2), (5, None), (1, None)]
)
def test_no_window_when_the_engines_sequences_cannot_fill_the_cache(
    max_running_requests: int, groups: int | None
) -> None:
    """A peak of 26 blocks over 3 calls: 5 sequences of such calls hold 26 * 5 // 3 = 43
    blocks of 44 (no window), 6 hold 52 (a window of ceil(44 / 26) = 2)."""
    window = InstanceWindow.sized(44, InstancePeak(26, 3), max_running_requests)
    assert window.groups == groups


@pytest.mark.parametrize(
    ("capacity_blocks", "peak", "max_running_requests"),
    [
        (0, InstancePeak(5, 1), None),
        (44, InstancePeak(0, 1), None),
        (44, InstancePeak(5, 0), None),
        (44, InstancePeak(5, 1), 0),
    ],
)
def test_the_window_refuses_an_empty_cache_peak_or_engine(
    capacity_blocks: int, peak: InstancePeak, max_running_requests: int | None
) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        InstanceWindow.sized(capacity_blocks, peak, max_running_requests)


def test_the_window_admits_started_instances_and_new_ones_while_there_is_room() -> None:
    window = InstanceWindow(2, "test")
    assert window.admits(set(), (0,))
    assert window.admits({(0,)}, (1,))
    assert window.admits({(0,), (1,)}, (0,))
    assert not window.admits({(0,), (1,)}, (2,))
    assert InstanceWindow(None, "off").admits({(0,), (1,), (2,)}, (3,))
