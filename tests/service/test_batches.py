"""OpenAI's Files and Batch APIs on the job server, driven by the ``openai`` client itself:
upload, create, retrieve, download the answers (equal to ``kalypso batch run``'s on its
own simulator), cancel; a bad file refused naming its line; another caller's batch and
file unseen."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

openai = pytest.importorskip("openai")

from kalypso.batch import arun_batch  # noqa: E402
from kalypso.engine.sim import SimEngine  # noqa: E402

from ..batch.test_batch_run import docs_by_questions, write  # noqa: E402
from .conftest import LiveServer  # noqa: E402


def client_for(live: LiveServer, name: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key=live.token(name), max_retries=0)


def wait(client: openai.OpenAI, batch_id: str) -> object:
    deadline = time.monotonic() + 60
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        assert time.monotonic() < deadline, batch.status
        time.sleep(0.05)


def alone(source: Path, tmp_path: Path) -> list[dict[str, object]]:
    async def go() -> list[dict[str, object]]:
        engine = SimEngine("smollm2-cpu")
        try:
            await arun_batch(source, tmp_path / "alone.jsonl", engine)
        finally:
            await engine.close()
        return [json.loads(x) for x in (tmp_path / "alone.jsonl").read_text().splitlines()]

    return asyncio.run(go())


def answers_of(lines: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [
        (line["custom_id"], line["response"]["body"]["choices"][0]["message"]["content"])  # type: ignore[index]
        for line in lines
    ]


def test_a_batch_through_the_openai_client(live: LiveServer, tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", docs_by_questions(4, 3))
    client = client_for(live, "openai-user")
    uploaded = client.files.create(file=source.open("rb"), purpose="batch")
    assert uploaded.bytes == source.stat().st_size and uploaded.filename == "in.jsonl"
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "nightly"},
    )
    assert batch.status == "validating" and batch.request_counts.total == 12
    done = wait(client, batch.id)
    assert done.status == "completed", done.errors  # type: ignore[attr-defined]
    assert done.request_counts.completed == 12 and done.request_counts.failed == 0  # type: ignore[attr-defined]
    assert done.error_file_id is None and done.metadata == {"run": "nightly"}  # type: ignore[attr-defined]
    text = client.files.content(done.output_file_id).text  # type: ignore[attr-defined]
    got = [json.loads(x) for x in text.splitlines()]
    assert answers_of(got) == answers_of(alone(source, tmp_path))
    assert [b.id for b in client.batches.list().data] == [batch.id]
    # the batch is a job: /v1/jobs lists it
    jobs = httpx.get(
        live.url + "/v1/jobs", headers={"Authorization": f"Bearer {live.token('openai-user')}"}
    ).json()
    assert [j["id"] for j in jobs["data"]] == [batch.id]
    stranger = client_for(live, "stranger")
    with pytest.raises(openai.NotFoundError):
        stranger.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        stranger.files.content(done.output_file_id)  # type: ignore[attr-defined]


def test_a_bad_batch_file_is_refused_naming_its_line(live: LiveServer, tmp_path: Path) -> None:
    lines = docs_by_questions(1, 2)
    lines.insert(1, '{"custom_id": "x", "method": "POST"}')
    source = write(tmp_path / "bad.jsonl", lines)
    client = client_for(live, "careless")
    uploaded = client.files.create(file=source.open("rb"), purpose="batch")
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert "line 2" in str(raised.value)
    with pytest.raises(openai.UnprocessableEntityError, match="purpose"):
        client.files.create(file=source.open("rb"), purpose="fine-tune")
    with pytest.raises(openai.UnprocessableEntityError):
        client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/embeddings",
            completion_window="24h",  # type: ignore[arg-type]
        )


def test_cancelling_a_batch(live: LiveServer, tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", docs_by_questions(40, 5))
    client = client_for(live, "canceller")
    uploaded = client.files.create(file=source.open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelled = client.batches.cancel(batch.id)
    assert cancelled.status in ("cancelling", "cancelled")
    assert wait(client, batch.id).status == "cancelled"  # type: ignore[attr-defined]
    assert live.manager.ledger.reserved_blocks == 0
