"""A running job's progress, as the job server keeps and shows it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kalypso.core.ledger import KVLedger
from kalypso.core.report import StageView
from kalypso.service.journal import JournalCounts

KV_SAMPLES_KEPT = 240
"""KV-in-use samples kept per job for the page's chart (at the flush interval, 2 minutes
at 0.5 s; older ones are thinned to every other)."""


@dataclass
class LiveProgress:
    """What the scheduler last showed for a running job (fed by the run's progress
    listener), and its KV use over time (over every replica's ledger, its chunks'
    blocks included). :meth:`snapshot` is what the API reports."""

    owner: str
    ledgers: Sequence[KVLedger]
    counts: JournalCounts
    started_s: float
    pipelines: dict[int, list[StageView]] = field(default_factory=dict)
    kv_samples: list[tuple[float, int]] = field(default_factory=list)
    updates: int = 0

    def on_progress(self, pipeline: int, views: list[StageView]) -> None:
        self.pipelines[pipeline] = list(views)
        self.updates += 1

    def sample_kv(self, now_s: float) -> None:
        """Keep ``(seconds since start, KV blocks the job holds)``."""
        self.kv_samples.append((round(now_s - self.started_s, 2), self.held_blocks))
        if len(self.kv_samples) > KV_SAMPLES_KEPT:
            self.kv_samples = self.kv_samples[::2]

    @property
    def held_blocks(self) -> int:
        return sum(ledger.held_under(self.owner) for ledger in self.ledgers)

    def snapshot(self) -> dict[str, Any]:
        counts = self.counts
        prompt = counts.prompt_tokens
        return {
            "stages": [
                {
                    "pipeline": number,
                    "stage": index + 1,
                    "done": view.done,
                    "waiting": view.waiting,
                    "running": view.running,
                    "budget_blocks": view.budget_blocks,
                    "kv_blocks": view.used_blocks,
                }
                for number, views in sorted(self.pipelines.items())
                for index, view in enumerate(views)
            ],
            "calls": counts.recorded_calls + counts.replayed_calls,
            "engine_calls": counts.recorded_calls,
            "journal_calls": counts.replayed_calls,
            "prompt_tokens": prompt,
            "prefill_tokens": prompt - counts.cached_tokens,
            "hit_rate": round(counts.cached_tokens / prompt, 4) if prompt else 0.0,
            "kv_blocks": self.held_blocks,
            "kv_capacity_blocks": sum(ledger.capacity_blocks for ledger in self.ledgers),
            "kv_samples": [list(sample) for sample in self.kv_samples],
        }
