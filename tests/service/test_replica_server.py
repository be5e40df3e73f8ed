"""The job server on a replica set: plans, workflows and batch files as jobs over two
simulated engines equal their one-engine results; a plan that needs all its rows in one
place runs on one replica; a replica that dies mid-job moves its rows to the other, whose
run answers the dead replica's journaled calls from the journal instead of the engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

import kalypso
from kalypso.client import Client
from kalypso.engine.sim import SimEngine
from kalypso.engine.sim.tokenizer import WordTokenizer
from kalypso.service import Database

from ..batch.test_batch_run import docs_by_questions, write
from .conftest import LiveServer, start_server
from .engines import GatedSim
from .plans import (
    debate_workflow,
    questions,
    review_plan,
    reviews,
    same_rows,
    solo_table,
    solo_workflow,
)
from .test_batches import alone, answers_of, client_for, wait


def replicas(first_fails_after: int | None = None) -> list[SimEngine]:
    """Two simulators sharing a tokenizer, as replicas of one model share theirs (a
    journaled call matches the same prompt's token ids on either); the first one's
    engine failing from call ``first_fails_after + 1`` on, when given."""
    tokenizer = WordTokenizer()
    first = (
        SimEngine("smollm2-cpu", tokenizer=tokenizer)
        if first_fails_after is None
        else GatedSim(fail_after=first_fails_after, free_calls=10**6, tokenizer=tokenizer)
    )
    return [first, SimEngine("smollm2-cpu", tokenizer=tokenizer)]


def held_nothing(live: LiveServer) -> bool:
    return all(ledger.reserved_blocks == 0 and not ledger.owners for ledger in live.manager.ledgers)


def test_jobs_on_two_replicas_equal_their_one_engine_results(
    database: Database, tmp_path: Path
) -> None:
    live = start_server(database, replicas)
    try:
        health = httpx.get(live.url + "/healthz").json()
        assert health["replicas"] == 2
        assert health["kv_capacity_blocks"] == 2 * live.manager.ledger.capacity_blocks
        topk = kalypso.table(reviews(8), name="reviews").sem_topk("Which {text} is best?", 3)
        with Client(live.url, live.token("ann")) as client:
            table = client.submit(review_plan(24))
            flow = client.submit(debate_workflow(), inputs={"question": questions(6)})
            ranked = client.submit(topk)
            for job, expected in (
                (table, solo_table(review_plan(24))),
                (flow, solo_workflow(debate_workflow(), {"question": questions(6)})),
                (ranked, solo_table(topk)),
            ):
                assert client.wait(job["id"], timeout_s=60)["status"] == "completed"
                assert same_rows(client.result(job["id"]), expected)
        rows_done = [replica.units_done for replica in live.manager.shared.replicas.replicas]
        assert all(done > 0 for done in rows_done)  # both replicas ran rows and queries
        source = write(tmp_path / "in.jsonl", docs_by_questions(4, 3))
        openai_client = client_for(live, "openai-user")
        uploaded = openai_client.files.create(file=source.open("rb"), purpose="batch")
        batch = openai_client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = wait(openai_client, batch.id)
        assert done.status == "completed", done.errors  # type: ignore[attr-defined]
        text = openai_client.files.content(done.output_file_id).text  # type: ignore[attr-defined]
        got = [json.loads(line) for line in text.splitlines()]
        assert answers_of(got) == answers_of(alone(source, tmp_path))
        assert held_nothing(live)
    finally:
        live.stop()


def test_a_replica_dying_mid_job_moves_its_rows_and_redoes_no_journaled_call(
    database: Database,
) -> None:
    live = start_server(database, lambda: replicas(first_fails_after=22))
    try:
        with Client(live.url, live.token("ann")) as client:
            job = client.submit(review_plan(40))
            finished = client.wait(job["id"], timeout_s=60)
            assert finished["status"] == "completed", finished["errors"]
            assert same_rows(client.result(job["id"]), solo_table(review_plan(40)))
            progress = finished["progress"]
        set_ = live.manager.shared.replicas
        assert set_ is not None and [r.alive for r in set_.replicas] == [False, True]
        # the dead replica answered its filter calls; each was journaled, and the rows moved to the
        # live replica took those answers from the journal: no call answered twice
        assert progress["journal_calls"] > 0
        # progress sums the chunks' views; the failed chunk's are taken out, not counted
        assert [(s["stage"], s["done"]) for s in progress["stages"]] == [(1, 40)]
        assert progress["engine_calls"] == solo_requests(review_plan(40))
        assert held_nothing(live)
    finally:
        live.stop()


def solo_requests(plan: kalypso.Table) -> int:
    """Engine requests of the plan run alone on one simulator."""

    async def run() -> int:
        engine = SimEngine("smollm2-cpu")
        try:
            return (await plan.arun(engine)).requests
        finally:
            await engine.close()

    return asyncio.run(run())


def test_serve_refuses_contradicting_replica_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from kalypso.cli import main

    assert main(["serve", "--engine", "sim", "--url", "http://127.0.0.1:9"]) == 2
    assert "--url is for --engine http, not --engine sim" in capsys.readouterr().err
    assert main(["serve", "--engine", "sim", "--replicas", "0"]) == 2
    assert "--replicas must be at least 1" in capsys.readouterr().err
