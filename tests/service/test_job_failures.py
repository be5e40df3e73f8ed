"""A job's error paths on the server: cancellation at every state, an engine that fails,
a call that hangs past its timeout, a job past its completion window, a plan whose Python
step raises. Each leaves nothing held in the shared ledger and the server serving."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import kalypso
from kalypso.client import Client, ServiceError
from kalypso.service import Database

from .conftest import LiveServer, start_server
from .engines import GatedSim
from .plans import review_plan


def wait_until(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.fixture
def gated(database: Database) -> Iterator[tuple[LiveServer, GatedSim]]:
    holder: list[GatedSim] = []

    def make() -> GatedSim:
        holder.append(GatedSim(free_calls=5))
        return holder[0]

    server = start_server(database, make)
    yield server, holder[0]
    holder[0].open()
    server.stop()


def test_cancel_a_running_job_releases_everything(gated: tuple[LiveServer, GatedSim]) -> None:
    live, engine = gated
    with Client(live.url, live.token("alice")) as client:
        job = client.submit(review_plan(20))
        wait_until(lambda: engine.held > 0)
        assert client.status(job["id"])["status"] == "in_progress"
        assert live.manager.ledger.held_by(job["id"]) > 0
        cancelled = client.cancel(job["id"])
        assert cancelled["status"] in ("cancelling", "cancelled")
        assert client.wait(job["id"], timeout_s=30)["status"] == "cancelled"
        assert job["id"] not in live.manager.ledger.owners
        assert live.manager.ledger.reserved_blocks == 0
        with pytest.raises(ServiceError) as raised:
            client.result(job["id"])
        assert raised.value.status == 409
        # cancelling again changes nothing; the server still runs jobs
        assert client.cancel(job["id"])["status"] == "cancelled"
        engine.open()
        assert client.wait(client.submit(review_plan(3))["id"])["status"] == "completed"


def test_cancel_before_the_run_starts_and_after_it_ends(
    gated: tuple[LiveServer, GatedSim],
) -> None:
    live, engine = gated
    with Client(live.url, live.token("bob")) as client:
        engine.open()
        done = client.submit(review_plan(3))
        assert client.wait(done["id"])["status"] == "completed"
        assert client.cancel(done["id"])["status"] == "completed"


def test_an_engine_failure_fails_the_job_with_its_partial_result(database: Database) -> None:
    live = start_server(database, lambda: GatedSim(free_calls=10**6, fail_after=11))
    try:
        with Client(live.url, live.token("carol")) as client:
            job = client.wait(client.submit(review_plan(10))["id"])
            assert job["status"] == "failed" and job["failed_at"] is not None
            assert job["errors"][0]["code"] == "run_failed"
            assert "on cue" in job["errors"][0]["message"]
            assert job["request_counts"]["failed"] == 10
            if job["result_rows"] is not None:
                assert job["result_partial"]
                assert len(client.result(job["id"])) == job["result_rows"]
            assert live.manager.ledger.reserved_blocks == 0
    finally:
        live.stop()


def test_a_hanging_call_times_out_and_fails_the_job(gated: tuple[LiveServer, GatedSim]) -> None:
    live, _ = gated
    with Client(live.url, live.token("dave")) as client:
        job = client.submit(review_plan(20), options={"call_timeout_s": 0.5})
        done = client.wait(job["id"], timeout_s=30)
        assert done["status"] == "failed"
        assert "Timeout" in done["errors"][0]["message"]
        assert live.manager.ledger.reserved_blocks == 0


def test_a_job_past_its_completion_window_expires(gated: tuple[LiveServer, GatedSim]) -> None:
    live, _ = gated
    with Client(live.url, live.token("erin")) as client:
        job = client.submit(review_plan(20), completion_window_s=0.5)
        done = client.wait(job["id"], timeout_s=30)
        assert done["status"] == "expired" and done["expired_at"] is not None
        assert done["errors"][0]["code"] == "expired"
        assert live.manager.ledger.reserved_blocks == 0


@kalypso.register_function("tests.service.explode")
def explode(row: dict[str, object]) -> object:
    raise RuntimeError(f"row {row['id']} is cursed")


def test_a_python_step_that_raises_fails_the_job(live: LiveServer) -> None:
    plan = kalypso.table([{"id": 1, "text": "a"}]).map(explode, "boom")
    with Client(live.url, live.token("frank")) as client:
        done = client.wait(client.submit(plan)["id"])
        assert done["status"] == "failed"
        assert "cursed" in done["errors"][0]["message"]
