"""The live progress view renders per-stage counts, KV and the hit rate on a terminal, and
stays silent when disabled."""

from __future__ import annotations

import io

from rich.console import Console

from kalypso.core.progress import ProgressView
from kalypso.core.report import StageView


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100), out


def test_the_view_shows_each_stage_and_the_hit_rate() -> None:
    console, out = terminal()
    with ProgressView(enabled=True, console=console, hit_rate=lambda: (300, 1200)) as view:
        view.update(1, [StageView(7, 3, 2, 40, 31), StageView(1, 0, 4, 24, 20)])
        view.update(1, [StageView(9, 1, 2, 40, 33), StageView(2, 0, 4, 24, 22)])
    text = out.getvalue()
    assert "pipeline 1 - prefix-cache hits 25% of 1200 prompt tokens" in text
    for header in ("done", "waiting", "running", "budget (blocks)", "KV held (blocks)"):
        assert header in text
    assert "33" in text and "22" in text  # the latest update was drawn


def test_a_disabled_view_prints_nothing() -> None:
    console, out = terminal()
    with ProgressView(enabled=False, console=console) as view:
        view.update(1, [StageView(1, 2, 3, 4, 5)])
    assert out.getvalue() == ""
