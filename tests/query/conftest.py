"""Markers of the query tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "issue_9: a malformed input of the reviewer's report (issue 9, item 7) that went"
        " wrong before (silent, a raw crash, or refused only after LLM calls ran)",
    )
