"""A job's states: OpenAI's Batch API's names, and which are final."""

from __future__ import annotations

VALIDATING = "validating"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
FAILED = "failed"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
EXPIRED = "expired"

STATES = (VALIDATING, IN_PROGRESS, FINALIZING, COMPLETED, FAILED, CANCELLING, CANCELLED, EXPIRED)
FINAL = frozenset({COMPLETED, FAILED, CANCELLED, EXPIRED})
"""States a job never leaves."""
ACTIVE = frozenset(STATES) - FINAL
"""States of a job that counts against its token's running-jobs limit, and that a
restarted server resumes."""
