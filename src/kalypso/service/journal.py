"""The call journal on the job server's database (:class:`kalypso.core.hooks.CallJournal`).

Every call the engine answers is committed before its answer is used, keyed by the job,
the call site (node, instance) and a SHA-256 of the request's prompt token ids and
decoding parameters. Calls that finish while a commit is under way share the next one
(group commit, :meth:`~kalypso.service.database.Database.add_soon`): one commit per
burst rather than per call, the same durability. A job started again (after a crash or a
restart) loads its journal first, and the runner takes each recorded answer instead of
sending the call.

The output cap is kept beside the answer rather than hashed: after a restart the bound
estimator may size a call differently. A recorded answer serves a request with the same
cap, or one whose answer ended on its own (not at the cap) within the new cap; a greedy
call gives that same answer under any larger cap.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kalypso.core.hooks import CallSite
from kalypso.engine.protocol import GenerateRequest, GenerateResult, RequestTimings
from kalypso.service.database import Database
from kalypso.service.db import CallRow, utcnow

logger = logging.getLogger(__name__)


def request_sha256(request: GenerateRequest) -> str:
    """What decides a call's answer, besides its output cap, as a hex digest."""
    decided_by = [
        list(request.prompt_token_ids),
        request.greedy,
        request.temperature,
        request.top_p,
        request.seed,
        list(request.stop) if request.stop else None,
        request.ignore_eos,
        list(request.allowed_token_ids) if request.allowed_token_ids else None,
        request.logprobs,
    ]
    return hashlib.sha256(json.dumps(decided_by).encode()).hexdigest()


def _instance_key(key: tuple[int, ...]) -> str:
    return ".".join(map(str, key))


def _encode(request: GenerateRequest, result: GenerateResult) -> dict[str, Any]:
    return {
        "max_tokens": request.max_tokens,
        "output_token_ids": list(result.output_token_ids),
        "text": result.text,
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "logprobs": [[list(pair) for pair in position] for position in result.logprobs],
        "token_logprobs": list(result.token_logprobs),
    }


def _decode(request: GenerateRequest, data: dict[str, Any]) -> GenerateResult:
    return GenerateResult(
        request_id=request.request_id,
        output_token_ids=tuple(data["output_token_ids"]),
        text=data["text"],
        finish_reason=data["finish_reason"],
        prompt_tokens=data["prompt_tokens"],
        cached_tokens=data["prompt_tokens"],  # nothing computed now
        timings=RequestTimings(0.0, 0.0, 0.0),
        logprobs=tuple(tuple((int(t), float(p)) for t, p in pos) for pos in data["logprobs"]),
        token_logprobs=tuple(float(p) for p in data["token_logprobs"]),
    )


def _serves(data: dict[str, Any], request: GenerateRequest) -> bool:
    if data["max_tokens"] == request.max_tokens:
        return True
    ended_itself = data["finish_reason"] != "length"
    return ended_itself and len(data["output_token_ids"]) <= request.max_tokens


@dataclass
class JournalCounts:
    """What a journal did in one run of a job."""

    replayed_calls: int = 0
    """Calls answered from the journal (never sent to the engine)."""
    recorded_calls: int = 0
    """Calls the engine answered, journaled."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Of the recorded calls' prompt tokens, those the engine found in its prefix cache."""


@dataclass
class DatabaseJournal:
    """One job's journal (see the module docstring); :meth:`load` reads what an earlier
    run of the job recorded."""

    database: Database
    job_id: str
    counts: JournalCounts = field(default_factory=JournalCounts)
    _known: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    async def load(self) -> int:
        """Read the job's recorded calls; returns how many there are."""

        def read(session: Session) -> list[tuple[str, str, str, dict[str, Any]]]:
            rows = session.execute(
                select(
                    CallRow.node_id, CallRow.instance_key, CallRow.request_sha256, CallRow.result
                ).where(CallRow.job_id == self.job_id)
            )
            return [(n, i, h, r) for n, i, h, r in rows]

        for node_id, instance, digest, data in await self.database.run(read):
            self._known[(node_id, instance, digest)] = data
        return len(self._known)

    async def lookup(self, site: CallSite, request: GenerateRequest) -> GenerateResult | None:
        node_id, key = site
        data = self._known.get((node_id, _instance_key(key), request_sha256(request)))
        if data is None or not _serves(data, request):
            return None
        self.counts.replayed_calls += 1
        return _decode(request, data)

    async def record(
        self, site: CallSite, request: GenerateRequest, result: GenerateResult
    ) -> None:
        node_id, key = site
        row_key = (node_id, _instance_key(key), request_sha256(request))
        data = _encode(request, result)
        self.counts.recorded_calls += 1
        self.counts.prompt_tokens += result.prompt_tokens
        self.counts.cached_tokens += result.cached_tokens

        if row_key in self._known:  # the same call again under another cap: keep the first
            return
        self._known[row_key] = data
        await self.database.add_soon(
            CallRow(
                job_id=self.job_id,
                node_id=row_key[0],
                instance_key=row_key[1],
                request_sha256=row_key[2],
                result=data,
                created_at=utcnow(),
            )
        )

    async def compact(self) -> int:
        """Delete the job's journal (its result is stored); returns the rows deleted."""

        def drop(session: Session) -> int:
            deleted = session.execute(delete(CallRow).where(CallRow.job_id == self.job_id))
            session.commit()
            return int(getattr(deleted, "rowcount", 0) or 0)

        return await self.database.run(drop)
