"""A table's rows as data: inline JSON records or a base64-encoded Parquet file.

Contract:

* :class:`SourceSpec` holds exactly one of ``rows`` (one JSON object per row; values are
  strings, integers, finite numbers, booleans or null) and ``parquet_b64`` (a Parquet
  file, base64-encoded). Pydantic refuses anything else, naming the field: another
  value type, both or neither, text that is not base64, bytes that are not Parquet.
* :meth:`SourceSpec.of` writes a DataFrame exactly: as rows, a missing value (None, NaN)
  becomes null and a value JSON cannot carry (a list, a date, an infinity) or a table
  with columns but no rows is refused with :class:`PlanError` naming the fix
  (``source_format="parquet"``); as Parquet, the frame with its dtypes, without its index.
* :meth:`SourceSpec.data` is what :class:`~kalypso.query.plan.Table` is built from.
  Parquet is decoded from the bytes in memory: nothing here reads a path.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, FiniteFloat, field_validator, model_validator

from kalypso.core.errors import PlanError

SourceFormat = Literal["rows", "parquet"]
Scalar = str | int | FiniteFloat | bool | None
"""A value of a JSON row."""


class StrictSpec(BaseModel):
    """Base of every spec model: unknown fields and type coercions are refused, and a
    spec is immutable (two specs are equal when their fields are)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SourceSpec(StrictSpec):
    """A table's rows: ``rows`` (JSON records) or ``parquet_b64`` (Parquet), exactly one."""

    rows: list[dict[str, Scalar]] | None = None
    parquet_b64: str | None = None

    @field_validator("parquet_b64")
    @classmethod
    def _is_parquet(cls, text: str | None) -> str | None:
        if text is not None:
            _parquet_bytes(text)
        return text

    @model_validator(mode="after")
    def _exactly_one(self) -> SourceSpec:
        if (self.rows is None) == (self.parquet_b64 is None):
            raise ValueError("give exactly one of rows and parquet_b64")
        return self

    @classmethod
    def of(cls, frame: pd.DataFrame, source_format: SourceFormat, where: str) -> SourceSpec:
        """``frame`` as rows or Parquet (see the module docstring); ``where`` names the
        table in errors.

        Raises:
            PlanError: an unknown format, or a table that format cannot carry exactly.
        """
        if source_format == "rows":
            return cls(rows=_records(frame, where))
        if source_format == "parquet":
            return cls(parquet_b64=_parquet_text(frame, where))
        raise PlanError(f"source_format is 'rows' or 'parquet', got {source_format!r}")

    def data(self, where: str) -> pd.DataFrame | list[dict[str, Any]]:
        """The rows to build a table from: the records, or the decoded Parquet frame.

        Raises:
            PlanError: naming ``where``, for a Parquet file whose contents cannot be read.
        """
        if self.rows is not None:
            return [dict(record) for record in self.rows]
        assert self.parquet_b64 is not None
        try:
            return pd.read_parquet(io.BytesIO(_parquet_bytes(self.parquet_b64)))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise PlanError(f"{where}.parquet_b64: cannot read the Parquet file: {exc}") from None


def _parquet_bytes(text: str) -> bytes:
    """The Parquet file ``text`` encodes; its footer is read to check it is one.

    Raises:
        ValueError: the text is not base64, or the bytes are not a Parquet file.
    """
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64 text: {exc}") from None
    try:
        pq.ParquetFile(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"not a Parquet file: {exc}") from None
    return data


def _parquet_text(frame: pd.DataFrame, where: str) -> str:
    buffer = io.BytesIO()
    try:
        frame.to_parquet(buffer, index=False)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise PlanError(f"{where}: cannot write the table as Parquet: {exc}") from None
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _records(frame: pd.DataFrame, where: str) -> list[dict[str, Scalar]]:
    columns = [str(c) for c in frame.columns]
    if columns and len(frame) == 0:
        raise PlanError(
            f"{where}: a table without rows cannot carry its columns {columns} as JSON"
            " rows; use to_spec(source_format='parquet')"
        )
    return [
        {c: _scalar(v, where, c, row) for c, v in zip(columns, values, strict=True)}
        for row, values in enumerate(frame.itertuples(index=False, name=None))
    ]


def _scalar(value: Any, where: str, column: str, row: int) -> Scalar:
    """``value`` as a JSON row value: a missing one as None, numpy scalars as Python's.

    Raises:
        PlanError: a value of another type, or an infinity.
    """
    if isinstance(value, np.bool_ | np.number | np.str_):
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str | bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    raise PlanError(
        f"{where}: column {column!r}, row {row}: the value {value!r} ({type(value).__name__})"
        " cannot travel as a JSON row; use to_spec(source_format='parquet')"
    )
