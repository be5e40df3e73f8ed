"""A Python client of ``kalypso serve``::

    client = kalypso.Client("http://127.0.0.1:8080", token)
    job = client.submit(plan)                 # a Table, a Workflow (with inputs=), or a spec
    for event in client.events(job["id"]):    # progress, until the job is final
        ...
    frame = client.result(job["id"])          # a pandas DataFrame

Every error the server answers is raised as :class:`ServiceError` with its status, code,
message and the field at fault.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pandas as pd

from kalypso.jobspec import JobOptions, JobSpec
from kalypso.query import Table
from kalypso.workflow import Workflow

logger = logging.getLogger(__name__)

FINAL_STATES = frozenset({"completed", "failed", "cancelled", "expired"})


class ServiceError(RuntimeError):
    """The server answered an error (see the API's error shape)."""

    def __init__(self, status: int, code: str, message: str, param: str | None) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (at {param})" if param else ""))
        self.status = status
        self.code = code
        self.message = message
        self.param = param


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of a job: its id (for resuming), type and data."""

    id: int
    type: str
    data: dict[str, Any]


def job_spec(
    plan: Table | Workflow | JobSpec | Mapping[str, Any],
    *,
    inputs: Mapping[str, Sequence[str]] | None = None,
    options: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
    completion_window_s: float | None = None,
) -> JobSpec:
    """The job spec for ``plan`` (a table plan, a workflow with its ``inputs``, a spec, or
    a spec's JSON)."""
    if isinstance(plan, JobSpec):
        return plan
    if isinstance(plan, Mapping):
        return JobSpec.model_validate(plan)
    return JobSpec(
        plan=plan.to_spec(),
        inputs={k: list(v) for k, v in inputs.items()} if inputs is not None else None,
        options=JobOptions.model_validate(dict(options or {})),
        metadata=dict(metadata or {}),
        completion_window_s=completion_window_s,
    )


class Client:
    """A connection to one server with one API token (see the module docstring)."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 60.0) -> None:
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise _error(response)
        return response

    def submit(
        self,
        plan: Table | Workflow | JobSpec | Mapping[str, Any],
        *,
        inputs: Mapping[str, Sequence[str]] | None = None,
        options: Mapping[str, Any] | None = None,
        metadata: Mapping[str, str] | None = None,
        completion_window_s: float | None = None,
    ) -> dict[str, Any]:
        """Submit a job; returns the job object (``id``, ``status``, ...)."""
        spec = job_spec(
            plan,
            inputs=inputs,
            options=options,
            metadata=metadata,
            completion_window_s=completion_window_s,
        )
        body = spec.model_dump_json(exclude_none=True)
        headers = {"Content-Type": "application/json"}
        job: dict[str, Any] = self._call("POST", "/v1/jobs", content=body, headers=headers).json()
        return job

    def status(self, job_id: str) -> dict[str, Any]:
        """The job object: its state, progress, calls, tokens, errors."""
        job: dict[str, Any] = self._call("GET", f"/v1/jobs/{job_id}").json()
        return job

    def jobs(self, *, limit: int = 20, after: str | None = None) -> dict[str, Any]:
        """One page of the caller's jobs, newest first (``after``: the previous last id)."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        page: dict[str, Any] = self._call("GET", "/v1/jobs", params=params).json()
        return page

    def cancel(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/cancel").json()
        return job

    def result(self, job_id: str) -> pd.DataFrame:
        """The job's result table (partial for a failed job)."""
        response = self._call("GET", f"/v1/jobs/{job_id}/result", params={"format": "parquet"})
        return pd.read_parquet(io.BytesIO(response.content))

    def result_bytes(self, job_id: str, format: str = "parquet") -> bytes:
        """The result as the server sends it (``parquet`` or ``json``)."""
        return self._call("GET", f"/v1/jobs/{job_id}/result", params={"format": format}).content

    def events(self, job_id: str, *, last_event_id: int | None = None) -> Iterator[Event]:
        """The job's events from after ``last_event_id`` until its final status. A dropped
        connection is resumed from the last event seen."""
        seen = last_event_id
        while True:
            headers = {"Last-Event-ID": str(seen)} if seen is not None else {}
            try:
                with self._http.stream(
                    "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=None
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise _error(response)
                    for event in _parse_sse(response.iter_lines()):
                        seen = event.id
                        yield event
                        if event.type == "status" and event.data.get("status") in FINAL_STATES:
                            return
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                logger.info("event stream of %s dropped (%s); resuming after %s", job_id, exc, seen)
                time.sleep(0.5)

    def wait(self, job_id: str, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Block until the job is final (following its events); returns the job object."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for _ in self.events(job_id):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not final after {timeout_s} s")
        return self.status(job_id)


def _parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if "data" in fields:
                yield Event(
                    int(fields.get("id", "0")),
                    fields.get("event", "message"),
                    json.loads(fields["data"]),
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


def _error(response: httpx.Response) -> ServiceError:
    try:
        detail = response.json()["error"]
        return ServiceError(
            response.status_code, detail["code"], detail["message"], detail.get("param")
        )
    except (ValueError, KeyError, TypeError):
        return ServiceError(response.status_code, "http_error", response.text[:500], None)
