"""Benchmark records name the date, the commit and the host they were measured on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.stamp import current_commit, run_stamp


def test_the_stamp_names_a_date_a_commit_and_the_host() -> None:
    stamp = run_stamp()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", stamp.date)
    assert re.fullmatch(r"[0-9a-f]{7,40}(\+changes)?", stamp.commit), stamp.commit
    assert "cores" in stamp.host
    assert run_stamp() is stamp  # fixed for the invocation


def test_outside_a_checkout_the_commit_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert current_commit() == "unknown"
