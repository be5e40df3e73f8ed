"""Result tables to and from Parquet bytes, and as JSON records."""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd


def to_parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def from_parquet_bytes(data: bytes) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(data))


def json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as JSON-ready dicts (pandas' own encoding: NaN as null, arrays as lists)."""
    records: list[dict[str, Any]] = json.loads(frame.to_json(orient="records"))
    return records
