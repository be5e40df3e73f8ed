"""``/metrics`` in Prometheus' text format: jobs by state, the calls and tokens of the
jobs this process ran, and the shared KV ledgers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from kalypso.service import states
from kalypso.service.manager import JobManager


class _Snapshot(Collector):
    def __init__(self, manager: JobManager, jobs_by_state: dict[str, int]) -> None:
        self._manager = manager
        self._jobs = jobs_by_state

    def collect(self):  # type: ignore[no-untyped-def]
        jobs = GaugeMetricFamily("kalypso_jobs", "Jobs in the database by state", labels=["state"])
        for state in states.STATES:
            jobs.add_metric([state], self._jobs.get(state, 0))
        yield jobs
        totals = self._manager.totals
        calls = CounterMetricFamily(
            "kalypso_calls", "LLM calls of finished runs, by who answered", labels=["source"]
        )
        calls.add_metric(["engine"], totals.engine_calls)
        calls.add_metric(["journal"], totals.journal_calls)
        yield calls
        tokens = CounterMetricFamily(
            "kalypso_prompt_tokens", "Prompt tokens the engine was sent, by where", labels=["kind"]
        )
        tokens.add_metric(["cached"], totals.cached_tokens)
        tokens.add_metric(["computed"], totals.prompt_tokens - totals.cached_tokens)
        yield tokens
        ledgers = self._manager.ledgers
        yield GaugeMetricFamily(
            "kalypso_kv_reserved_blocks",
            "KV blocks reserved in the shared ledgers (of every replica)",
            value=sum(ledger.reserved_blocks for ledger in ledgers),
        )
        yield GaugeMetricFamily(
            "kalypso_kv_capacity_blocks",
            "KV blocks of the engines",
            value=sum(ledger.capacity_blocks for ledger in ledgers),
        )
        yield CounterMetricFamily(
            "kalypso_calls_preempted",
            "Calls aborted in the engine for a more urgent job, and sent again",
            value=sum(ledger.preempted_calls for ledger in ledgers),
        )
        yield GaugeMetricFamily(
            "kalypso_running_jobs", "Jobs running in this process", value=self._manager.running_jobs
        )


def metrics_text(manager: JobManager, jobs_by_state: dict[str, int]) -> tuple[bytes, str]:
    """The exposition body and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(manager, jobs_by_state))
    return generate_latest(registry), CONTENT_TYPE_LATEST
