"""Writing the bundled JSON-lines tables (``src/kalypso/datasets/data/``) and reading them.

The on-disk form is canonical: one JSON object per row, keys in column order,
``ensure_ascii=False``, ``\\n`` line endings and a final newline. :func:`to_jsonl` is what
:func:`write_jsonl` writes, so a test can compare a generated frame with a bundled file
byte for byte. The package reads them with :func:`kalypso.datasets.reviews.read_jsonl`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kalypso.datasets.reviews import DATA_DIR, read_jsonl

__all__ = ["DATA_DIR", "read_jsonl", "to_jsonl", "write_jsonl"]


def _plain(value: Any) -> Any:
    """Turn numpy scalars and arrays into the JSON-serialisable Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return value


def to_jsonl(frame: pd.DataFrame) -> str:
    """The canonical JSON-lines text of ``frame`` (one row per line, final newline)."""
    columns = [str(c) for c in frame.columns]
    lines = []
    for row in frame.itertuples(index=False, name=None):
        record = {col: _plain(val) for col, val in zip(columns, row, strict=True)}
        lines.append(json.dumps(record, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def write_jsonl(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` in the canonical form, creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_jsonl(frame), encoding="utf-8", newline="\n")
