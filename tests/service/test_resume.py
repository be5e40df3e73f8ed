"""Crash-safe resume: ``kill -9`` of a real ``kalypso serve`` process in the middle of a
job, a restart on the same database, and the job finishes with the result of an
uninterrupted run, sending none of the calls it had journaled to the engine again; also
when the server runs on a replica set, and restarts on another number of replicas."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from kalypso.client import Client
from kalypso.service import Database
from kalypso.service.db import CallRow

from .conftest import database_url, free_port
from .plans import review_plan, same_rows, solo_table

REPO = Path(__file__).resolve().parents[2]
ROWS = 600


STARTUP_S = 240.0
"""How long a ``kalypso serve`` process may take to answer: it imports the job server and
opens its database, which took over a minute on a 2-core host running the suite's
engine streams beside it."""


class ServerProcess:
    """``kalypso serve`` on the simulator in a process of its own."""

    def __init__(self, db_url: str, log: Path, replicas: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kalypso.cli",
                "serve",
                "--engine",
                "sim",
                "--sim-profile",
                "smollm2-cpu",
                "--db",
                db_url,
                "--port",
                str(self.port),
                "--import",
                "tests.service.plans",
                *(["--replicas", str(replicas)] if replicas > 1 else []),
            ],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_until_it_answers(log)
        except BaseException:
            self.kill()  # not yet in the fixture's list: stop it here, even on failure
            raise

    def _wait_until_it_answers(self, log: Path) -> None:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert self.process.poll() is None, f"the server exited; see {log}"
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the server did not start; see {log}"
            time.sleep(0.1)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        self.process.wait(timeout=30)
        self._log.close()


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.kill()


def journaled(database: Database, job_id: str) -> int:
    with database.session() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(CallRow).where(CallRow.job_id == job_id)
            )
            or 0
        )


@pytest.mark.parametrize(("before", "after"), [(1, 1), (2, 3)], ids=["one-engine", "replicas"])
def test_kill_9_mid_job_then_restart_resumes_without_repeating_calls(
    tmp_path: Path, processes: list[ServerProcess], before: int, after: int
) -> None:
    url = database_url(tmp_path)
    database = Database(url)
    try:
        with database.session() as session:
            from kalypso.service.tokens import create_token

            token = create_token(session, "resumer")
        first = ServerProcess(url, tmp_path / "server.log", before)
        processes.append(first)
        with Client(first.url, token) as client:
            job_id = client.submit(review_plan(ROWS))["id"]
        deadline = time.monotonic() + 60
        while journaled(database, job_id) < 150:
            assert time.monotonic() < deadline, "the job journaled too few calls"
            time.sleep(0.01)
        first.kill(signal.SIGKILL)
        kept = journaled(database, job_id)
        assert kept >= 150
        second = ServerProcess(url, tmp_path / "server.log", after)
        processes.append(second)
        assert httpx.get(second.url + "/healthz").json()["replicas"] == after
        with Client(second.url, token) as client:
            done = client.wait(job_id, timeout_s=120)
            assert done["status"] == "completed", done["errors"]
            assert done["runs"] == 2
            progress = done["progress"]
            assert progress["journal_calls"] == kept
            expected = solo_table(review_plan(ROWS))
            assert progress["calls"] == ROWS + len(expected)
            assert progress["engine_calls"] == progress["calls"] - kept
            assert same_rows(client.result(job_id), expected)
        assert journaled(database, job_id) == 0  # compacted once finished
        second.kill(signal.SIGTERM)
    finally:
        database.close()


def test_a_server_that_does_not_answer_in_time_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def recorded(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        started.append(popen(*args, **kwargs))  # type: ignore[call-overload]
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", recorded)
    monkeypatch.setattr(sys.modules[__name__], "STARTUP_S", 0.0)
    with pytest.raises(AssertionError, match="did not start"):
        ServerProcess(database_url(tmp_path), tmp_path / "server.log", 1)
    assert len(started) == 1 and started[0].poll() is not None  # killed, not left running
