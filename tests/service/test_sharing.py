"""Many jobs on one engine: twenty jobs from three callers all finish with their solo
results while the shared ledger stays within the engine's capacity, and a small job
started beside a large one does not wait for it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kalypso.client import Client
from kalypso.engine.sim import SimEngine
from kalypso.service import Database

from .conftest import LiveServer, start_server
from .plans import debate_workflow, questions, review_plan, same_rows, solo_table, solo_workflow


def test_twenty_jobs_from_three_callers_each_equal_to_its_solo_run(live: LiveServer) -> None:
    callers = ["ann", "ben", "cat"]
    tokens = {name: live.token(name, max_running_jobs=20) for name in callers}
    jobs: list[tuple[str, str, Any]] = []
    for number in range(20):
        name = callers[number % 3]
        if number % 5 == 4:
            inputs = {"question": questions(3 + number % 4)}
            jobs.append((name, "workflow", inputs))
        else:
            jobs.append((name, "table", (4 + number % 7, 100 * number)))

    def submit(job: tuple[str, str, Any]) -> tuple[str, str, Any, str]:
        name, kind, args = job
        with Client(live.url, tokens[name]) as client:
            if kind == "workflow":
                return name, kind, args, client.submit(debate_workflow(), inputs=args)["id"]
            return name, kind, args, client.submit(review_plan(*args))["id"]

    with ThreadPoolExecutor(max_workers=6) as pool:
        submitted = list(pool.map(submit, jobs))
    for name, kind, args, job_id in submitted:
        with Client(live.url, tokens[name]) as client:
            assert client.wait(job_id, timeout_s=120)["status"] == "completed"
            got = client.result(job_id)
        expected = (
            solo_workflow(debate_workflow(), args)
            if kind == "workflow"
            else solo_table(review_plan(*args))
        )
        assert same_rows(got, expected), (kind, args)
    ledger = live.manager.ledger
    assert ledger.peak_reserved_blocks <= ledger.capacity_blocks
    assert ledger.reserved_blocks == 0 and not ledger.owners
    for name in callers:
        with Client(live.url, tokens[name]) as client:
            mine = client.jobs(limit=100)["data"]
        assert len(mine) == sum(1 for job in submitted if job[0] == name)


def test_a_small_job_beside_a_large_one_finishes_first(database: Database) -> None:
    live = start_server(database, lambda: SimEngine("qwen3-8b-h100", wall_s_per_virtual_s=1.0))
    try:
        with (
            Client(live.url, live.token("big")) as big,
            Client(live.url, live.token("small")) as small,
        ):
            large = big.submit(review_plan(1000))
            deadline = time.monotonic() + 30
            while (big.status(large["id"])["progress"] or {}).get("calls", 0) < 50:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            short = small.submit(review_plan(10, offset=5000))
            assert small.wait(short["id"], timeout_s=60)["status"] == "completed"
            assert big.status(large["id"])["status"] == "in_progress"
            assert big.wait(large["id"], timeout_s=120)["status"] == "completed"
    finally:
        live.stop()


def test_room_is_kept_for_a_smaller_job_only_on_a_large_cache() -> None:
    from kalypso.engine.protocol import EngineCapacity
    from kalypso.service.manager import urgent_reserve_blocks

    assert urgent_reserve_blocks(EngineCapacity(22_000, 16, 32_768)) == 2_750
    assert urgent_reserve_blocks(EngineCapacity(48, 128, 5_888)) == 0  # vLLM on a CPU
