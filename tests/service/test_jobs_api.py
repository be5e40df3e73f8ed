"""The job server's API through :class:`kalypso.Client` and raw HTTP, on the simulator:
a job's whole life, what each caller may see, the limits, and the error shape."""

from __future__ import annotations

import json

import httpx
import pytest

from kalypso.client import Client, ServiceError
from kalypso.service.tokens import revoke_token

from .conftest import LiveServer
from .plans import (
    debate_workflow,
    questions,
    review_plan,
    same_rows,
    solo_table,
    solo_workflow,
)


def test_a_table_job_from_submit_to_result(live: LiveServer) -> None:
    plan = review_plan(12)
    with Client(live.url, live.token("alice")) as client:
        job = client.submit(plan, metadata={"team": "qa"})
        assert job["status"] == "validating"
        assert job["request_counts"] == {"total": 12, "completed": 0, "failed": 0}
        statuses = [e.data["status"] for e in client.events(job["id"]) if e.type == "status"]
        assert statuses == ["validating", "in_progress", "finalizing", "completed"]
        done = client.status(job["id"])
        assert done["status"] == "completed"
        assert done["request_counts"] == {"total": 12, "completed": 12, "failed": 0}
        assert done["completed_at"] >= done["in_progress_at"] >= done["created_at"]
        assert done["metadata"] == {"team": "qa"}
        progress = done["progress"]
        expected = solo_table(review_plan(12))
        result = client.result(job["id"])
        assert same_rows(result, expected)
        assert done["result_rows"] == len(expected) and not done["result_partial"]
        # every row is filtered (12 calls), the kept ones mapped
        assert progress["calls"] == progress["engine_calls"] == 12 + len(expected)
        assert progress["journal_calls"] == 0
        assert progress["prompt_tokens"] >= progress["prefill_tokens"] > 0
        assert progress["stages"] and all(s["waiting"] == 0 for s in progress["stages"])
    assert live.manager.ledger.reserved_blocks == 0


def test_a_workflow_job_and_the_json_result(live: LiveServer) -> None:
    inputs = {"question": questions(5)}
    with Client(live.url, live.token("bob")) as client:
        job = client.submit(debate_workflow(), inputs=inputs)
        assert job["kind"] == "workflow"
        assert client.wait(job["id"])["status"] == "completed"
        expected = solo_workflow(debate_workflow(), inputs)
        assert same_rows(client.result(job["id"]), expected)
        document = json.loads(client.result_bytes(job["id"], "json"))
        assert document["columns"] == ["answer"] and not document["partial"]
        assert [r["answer"] for r in document["rows"]] == list(expected["answer"])


def test_listing_pages_through_the_callers_jobs_only(live: LiveServer) -> None:
    with Client(live.url, live.token("carol", max_running_jobs=10)) as carol:
        ids = [carol.submit(review_plan(2, offset=i))["id"] for i in range(5)]
        with Client(live.url, live.token("dave")) as dave:
            dave.submit(review_plan(2))
        seen: list[str] = []
        after = None
        while True:
            page = carol.jobs(limit=2, after=after)
            seen += [j["id"] for j in page["data"]]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert seen == ids[::-1]
        for job_id in ids:
            carol.wait(job_id)


def test_without_a_valid_token_every_v1_route_answers_401(live: LiveServer) -> None:
    token = live.token("erin")
    with Client(live.url, token) as client:
        job_id = client.submit(review_plan(2))["id"]
        client.wait(job_id)
    routes = [
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("GET", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/jobs/{job_id}/events"),
        ("GET", f"/v1/jobs/{job_id}/result"),
        ("POST", f"/v1/jobs/{job_id}/cancel"),
    ]
    with live.database.session() as session:
        revoke_token(session, live.names["erin"])
    for headers in (
        {},
        {"Authorization": "Bearer kal_nonsense"},
        {"Authorization": token},
        {"Authorization": f"Bearer {token}"},
    ):
        for method, path in routes:
            response = httpx.request(method, live.url + path, headers=headers, json={})
            assert response.status_code == 401, (method, path, headers)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "authentication_error"
    assert httpx.get(live.url + "/healthz").status_code == 200


def test_another_callers_job_answers_404(live: LiveServer) -> None:
    with Client(live.url, live.token("frank")) as frank:
        job_id = frank.submit(review_plan(2))["id"]
        frank.wait(job_id)
    with Client(live.url, live.token("grace")) as grace:
        for action in (
            lambda: grace.status(job_id),
            lambda: grace.result(job_id),
            lambda: grace.cancel(job_id),
            lambda: list(grace.events(job_id)),
            lambda: grace.status("job_doesnotexist"),
            lambda: grace.jobs(after=job_id),
        ):
            with pytest.raises(ServiceError) as raised:
                action()
            assert raised.value.status == 404 and raised.value.code == "job_not_found"


def test_limits_413_429_and_409(database: object) -> None:
    from kalypso.service import ServiceSettings

    from .conftest import start_server
    from .engines import GatedSim

    engines: list[GatedSim] = []

    def make() -> GatedSim:
        engines.append(GatedSim(free_calls=0))  # every call held until opened
        return engines[0]

    live = start_server(database, make, ServiceSettings(max_request_bytes=20_000))  # type: ignore[arg-type]
    try:
        with Client(live.url, live.token("heidi", max_running_jobs=2)) as client:
            with pytest.raises(ServiceError) as raised:
                client.submit(review_plan(400))
            assert raised.value.status == 413 and raised.value.code == "request_too_large"
            first = client.submit(review_plan(30))
            client.submit(review_plan(30, offset=30))
            with pytest.raises(ServiceError) as raised:
                client.submit(review_plan(2))
            assert raised.value.status == 429 and raised.value.code == "too_many_jobs"
            with pytest.raises(ServiceError) as raised:
                client.result(first["id"])
            assert raised.value.status == 409 and raised.value.code == "no_result"
            engines[0].open()
            assert client.wait(first["id"])["status"] == "completed"
            client.submit(review_plan(2))  # a slot is free again
        for path in ("/v1/jobs", "/v1/batches"):  # no declared length: cut off as it streams
            chunked = httpx.post(
                live.url + path,
                content=iter([b"{" + b" " * 15_000, b" " * 15_000 + b"}"]),
                headers={"Authorization": f"Bearer {live.token('heidi')}"},
            )
            assert chunked.status_code == 413, path
            assert chunked.json()["error"]["code"] == "request_too_large"
    finally:
        if engines:
            engines[0].open()
        live.stop()


def test_bad_json_and_the_error_shape(live: LiveServer) -> None:
    for path in ("/v1/jobs", "/v1/batches"):
        response = httpx.post(
            live.url + path,
            content=b"{not json",
            headers={"Authorization": f"Bearer {live.token('ivan')}"},
        )
        assert response.status_code == 400, path
        error = response.json()["error"]
        assert set(error) == {"type", "code", "message", "param"}
        assert error["code"] == "invalid_json"


def test_health_metrics_and_openapi(live: LiveServer) -> None:
    with Client(live.url, live.token("judy")) as client:
        client.wait(client.submit(review_plan(3))["id"])
    health = httpx.get(live.url + "/healthz").json()
    assert health["status"] == "ok" and health["engine"] == live.engine.name
    metrics = httpx.get(live.url + "/metrics").text
    assert 'kalypso_jobs{state="completed"} 1.0' in metrics
    assert 'kalypso_calls_total{source="engine"}' in metrics
    assert "kalypso_calls_preempted_total 0.0" in metrics
    schema = httpx.get(live.url + "/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/events"} <= set(schema["paths"])


def test_the_database_is_the_one_the_suite_was_given(live: LiveServer) -> None:
    import os

    from .conftest import POSTGRES_URL_VARIABLE

    dialect = live.database.engine.dialect.name
    assert dialect == ("postgresql" if os.environ.get(POSTGRES_URL_VARIABLE) else "sqlite")
    if dialect == "sqlite":
        with live.database.engine.connect() as connection:
            from sqlalchemy import text

            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_an_event_stream_resumes_after_its_last_event_id(live: LiveServer) -> None:
    with Client(live.url, live.token("kim")) as client:
        job_id = client.submit(review_plan(8))["id"]
        everything = list(client.events(job_id))
        assert [e.id for e in everything] == sorted(e.id for e in everything)
        middle = everything[len(everything) // 2]
        rest = list(client.events(job_id, last_event_id=middle.id))
        assert rest == [e for e in everything if e.id > middle.id]
        raw = httpx.get(
            f"{live.url}/v1/jobs/{job_id}/events",
            headers={
                "Authorization": f"Bearer {live.token('kim')}",
                "Last-Event-ID": str(everything[-2].id),
            },
        )
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert f"id: {everything[-1].id}" in raw.text
        assert f"id: {everything[-2].id}\r\n" not in raw.text
        assert f"id: {everything[-2].id}\n" not in raw.text
