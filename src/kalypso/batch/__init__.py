"""Batch files: OpenAI-format JSONL requests run on Kalypso's core, ordered by shared
prefix (:func:`arun_batch`, ``kalypso batch run``)."""

from kalypso.batch.reader import BatchFileError
from kalypso.batch.result import BatchResult
from kalypso.batch.run import arun_batch
from kalypso.batch.schema import BatchRequest, LineError

__all__ = ["BatchFileError", "BatchRequest", "BatchResult", "LineError", "arun_batch"]
