"""A batch file on a replica set of simulated engines (one virtual time): the same output
file as on one engine, the questions about one document on one replica, and the same
file again, with no line twice, when a replica dies mid-run."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from kalypso.batch import arun_batch
from kalypso.batch.reader import check_file
from kalypso.batch.replicated import affinity_keys
from kalypso.core.errors import PlanError, QueryError
from kalypso.core.ledger import KVLedger
from kalypso.core.replicas import ReplicaSet, ReplicaSetError
from kalypso.engine.sim.clock import SharedClock
from kalypso.engine.sim.engine import SimEngine

PROFILE = "qwen3-8b-h100"
SYSTEM = "Answer in a few words, from the document only."


def document(d: int) -> str:
    return f"Document {d}. " + " ".join(f"clause{d}x{w} holds" for w in range(120))


def line(d: int, q: int) -> dict[str, Any]:
    return {
        "custom_id": f"doc{d}-q{q}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "m",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{document(d)}\n\nQuestion {q}: what holds?"},
            ],
            "max_tokens": 8 + (d * 7 + q) % 9,
            "temperature": 0,
        },
    }


def batch_file(path: Path, documents: int, questions: int, lone: int = 0) -> Path:
    """``documents`` documents asked ``questions`` questions each, and ``lone`` documents
    asked one; shuffled."""
    lines = [line(d, q) for d in range(documents) for q in range(questions)]
    lines += [line(documents + d, 0) for d in range(lone)]
    random.Random(3).shuffle(lines)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def answers(path: Path) -> list[tuple[str, Any, Any]]:
    """Each output line but its random ids and timestamp, in file order."""
    rows = [json.loads(text) for text in path.read_text().splitlines()]
    return [
        (r["custom_id"], r["response"]["body"]["choices"], r["response"]["body"]["usage"])
        for r in rows
    ]


def replica_engines(count: int) -> tuple[list[SimEngine], SharedClock]:
    clock = SharedClock()
    return [SimEngine(PROFILE, clock=clock) for _ in range(count)], clock


def test_affinity_is_the_document_and_not_the_shared_system_prompt(tmp_path: Path) -> None:
    index = check_file(batch_file(tmp_path / "in.jsonl", documents=6, questions=3, lone=4))
    keys = affinity_keys(index, replicas=2)
    requests = index.read(range(index.requests))
    by_document: dict[str, set[bytes | None]] = {}
    for request, key in zip(requests, keys, strict=True):
        by_document.setdefault(request.custom_id.split("-")[0], set()).add(key)
    asked = [d for d, ks in by_document.items() if d < "doc6" and len(d) == 4]
    assert len(asked) == 6
    for d in asked:  # one key per document, distinct between documents
        (key,) = by_document[d]
        assert key is not None
    assert len({next(iter(by_document[d])) for d in asked}) == 6
    # a lone document shares only the system prompt, with more than a replica's share
    for d in ("doc6", "doc7", "doc8", "doc9"):
        assert by_document[d] == {None}


@pytest.mark.asyncio
async def test_three_replicas_write_the_one_engine_file(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", documents=12, questions=4, lone=3)
    alone = await arun_batch(source, tmp_path / "alone.jsonl", SimEngine(PROFILE))
    engines, clock = replica_engines(3)
    replicas = ReplicaSet(engines)
    seen: list[int] = []
    spread = await arun_batch(
        source,
        tmp_path / "spread.jsonl",
        replicas,
        chunk_requests=5,
        on_progress=lambda r: seen.append(r.requests),
    )
    assert answers(tmp_path / "spread.jsonl") == answers(tmp_path / "alone.jsonl")
    assert spread.answered == alone.answered == 51 and spread.failed == 0
    assert seen == sorted(seen) and seen[-1] == 51
    assert all(r.units_done > 0 for r in replicas.replicas)
    assert sum(r.units_done for r in replicas.replicas) == 51
    # a document's questions on one replica: it prefills the document once
    assert spread.prefill_tokens <= alone.prefill_tokens * 1.05
    assert clock.now_s == max(engine.now_s for engine in engines)


@pytest.mark.asyncio
async def test_a_replica_that_dies_mid_run_loses_and_repeats_no_line(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", documents=20, questions=4)
    await arun_batch(source, tmp_path / "alone.jsonl", SimEngine(PROFILE))
    engines, _ = replica_engines(2)
    replicas = ReplicaSet(engines)
    running = asyncio.create_task(
        arun_batch(source, tmp_path / "spread.jsonl", replicas, chunk_requests=8)
    )
    while engines[1].num_steps < 20:
        await asyncio.sleep(0)
    await engines[1].close()
    spread = await running
    assert answers(tmp_path / "spread.jsonl") == answers(tmp_path / "alone.jsonl")
    assert spread.answered == 80 and spread.failed == 0 and spread.errors == {}
    assert not replicas.replicas[1].alive
    assert replicas.replicas[0].ledger.reserved_blocks == 0
    assert not list(tmp_path.glob(".spread.jsonl.*")), "the pieces' folder is removed"


@pytest.mark.asyncio
async def test_every_replica_dying_keeps_each_answered_line_once(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", documents=20, questions=4)
    engines, _ = replica_engines(2)
    running = asyncio.create_task(
        arun_batch(source, tmp_path / "out.jsonl", ReplicaSet(engines), chunk_requests=4)
    )
    while engines[0].num_steps < 30 or engines[1].num_steps < 30:
        await asyncio.sleep(0)
    for engine in engines:
        await engine.close()
    with pytest.raises(ReplicaSetError):
        await running
    assert not (tmp_path / "out.jsonl").exists()
    kept = [c for c, _, _ in answers(tmp_path / "out.jsonl.part")]
    assert len(kept) == len(set(kept)) < 80


@pytest.mark.asyncio
async def test_a_replica_set_takes_no_ledger(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", documents=2, questions=2)
    engines, _ = replica_engines(2)
    with pytest.raises(PlanError, match="no ledger"):
        await arun_batch(source, tmp_path / "out.jsonl", ReplicaSet(engines), ledger=KVLedger(64))


@pytest.mark.asyncio
async def test_an_engine_that_dies_fails_a_one_engine_run_and_marks_no_line(
    tmp_path: Path,
) -> None:
    """On one engine, a line the engine refuses is that line's error; an engine that is
    gone fails the run: the lines answered are kept in ``.part``, none is marked failed."""
    source = batch_file(tmp_path / "in.jsonl", documents=20, questions=4)
    engine = SimEngine(PROFILE)
    running = asyncio.create_task(
        arun_batch(source, tmp_path / "out.jsonl", engine, chunk_requests=8)
    )
    while engine.num_steps < 40:
        await asyncio.sleep(0)
    await engine.close()
    with pytest.raises(QueryError) as failed:
        await running
    assert "closed" in str(failed.value)
    assert not (tmp_path / "out.jsonl").exists()
    assert not (tmp_path / "out.jsonl.errors.jsonl").exists()
    kept = [c for c, _, _ in answers(tmp_path / "out.jsonl.part")]
    assert 0 < len(kept) == len(set(kept)) < 80


def test_the_command_runs_a_file_on_replicas_and_refuses_bad_replica_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kalypso.cli import main

    source = batch_file(tmp_path / "in.jsonl", documents=6, questions=3)
    sim = ["--engine", "sim", "--sim-profile", PROFILE, "--no-progress"]
    one, three = tmp_path / "one.jsonl", tmp_path / "three.jsonl"
    assert main(["batch", "run", str(source), "-o", str(one), *sim]) == 0
    assert main(["batch", "run", str(source), "-o", str(three), *sim, "--replicas", "3"]) == 0
    assert answers(three) == answers(one)
    shown = capsys.readouterr().err
    assert "replica set: 3 engines" in shown
    assert shown.count("units done") == 3
    for flags, message in (
        (["--replicas", "0"], "--replicas must be at least 1"),
        (["--url", "http://127.0.0.1:9"], "--url is for --engine http"),
    ):
        out = tmp_path / "refused.jsonl"
        assert main(["batch", "run", str(source), "-o", str(out), *sim, *flags]) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()
    urls = ["--url", "http://127.0.0.1:9", "--url", "http://127.0.0.1:10"]
    http = ["--engine", "http", "--no-progress", *urls, "--replicas", "3"]
    assert main(["batch", "run", str(source), "-o", str(tmp_path / "x.jsonl"), *http]) == 2
    assert "--replicas 3 with 2 --url servers" in capsys.readouterr().err


async def test_opening_replicas_closes_those_opened_when_one_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kalypso.engine import open as opening
    from kalypso.engine.open import EngineSpec, open_engines
    from kalypso.engine.protocol import EngineError

    opened: list[SimEngine] = []

    async def open_one(spec: EngineSpec, *, log_path: Path | None = None) -> SimEngine:
        if len(opened) == 2:
            raise EngineError(f"cannot reach {spec.url}")
        opened.append(SimEngine(PROFILE))
        return opened[-1]

    monkeypatch.setattr(opening, "open_engine", open_one)
    urls = ["http://a:8000", "http://b:8000", "http://c:8000"]
    with pytest.raises(EngineError, match="http://c:8000"):
        await open_engines(EngineSpec(kind="http"), urls=urls)
    assert len(opened) == 2
    assert all(engine._closed_reason is not None for engine in opened)  # closed
    sims = await open_engines(EngineSpec(kind="sim", sim_profile=PROFILE), 3)
    assert sims[0]._clock is not None
    assert len({id(engine._clock) for engine in sims}) == 1  # one virtual time
    assert len({id(engine.tokenizer) for engine in sims}) == 1
