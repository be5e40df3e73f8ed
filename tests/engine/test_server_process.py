"""Server processes: the whole process group stops even when its leader already died, the
server dies with the Python process that started it (Linux), `kalypso engine serve`
prints the cost model and stops everything on SIGTERM, which reaches a caller mid-request,
and vLLM's admin endpoints are off unless asked for."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import psutil
import pytest

from kalypso import cli
from kalypso.engine.protocol import EngineError, UnsupportedFeatureError
from kalypso.engine.vllm_server import (
    ADMIN_ENV_VAR,
    DEFAULT_STARTUP_TIMEOUT_S,
    VLLMServer,
    launch_process_group,
    process_group_alive,
    stop_process_group,
)
from tests.conftest import start_long_request

pytestmark = pytest.mark.timeout(600)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _wait_gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_launched_process_dies_with_the_python_process_that_started_it() -> None:
    script = (
        "import sys, time\n"
        "from kalypso.engine.vllm_server import launch_process_group\n"
        f"child = launch_process_group({SLEEPER!r}, stdout=None)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    child_pid = None
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(child_pid)
        parent.kill()  # SIGKILL: no cleanup code of the parent runs
        parent.wait(timeout=30)
        assert _wait_gone(child_pid), "the launched process outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=30)
        if child_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child_pid, signal.SIGKILL)


def test_a_process_launched_from_a_short_lived_thread_survives_the_thread() -> None:
    """The parent-death signal follows the forking thread: the fork happens in a launcher
    thread that lives as long as the process."""
    launched: list[subprocess.Popen[bytes]] = []
    thread = threading.Thread(
        target=lambda: launched.append(launch_process_group(SLEEPER, stdout=None))
    )
    thread.start()
    thread.join()
    (process,) = launched
    try:
        time.sleep(0.5)
        assert process.poll() is None
    finally:
        stop_process_group(process, timeout_s=10)
    assert not process_group_alive(process.pid)


def test_stop_process_group_stops_children_of_a_dead_leader() -> None:
    leader = launch_process_group(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    assert leader.stdout is not None
    child_pid = int(leader.stdout.readline())
    try:
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(timeout=30)
        assert process_group_alive(leader.pid) and psutil.pid_exists(child_pid)
        stop_process_group(leader, timeout_s=10)
        assert not process_group_alive(leader.pid)
        assert _wait_gone(child_pid, 1.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)


def test_engine_serve_passes_admin_endpoints_and_startup_timeout_as_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []

    class Started(Exception):
        pass

    def fake_start(settings: object, **kwargs: Any) -> VLLMServer:
        calls.append({"settings": settings, **kwargs})
        raise Started

    monkeypatch.setattr(VLLMServer, "start", staticmethod(fake_start))
    for argv in (
        ["engine", "serve"],
        ["engine", "serve", "--admin-endpoints", "--deterministic", "--startup-timeout", "90"],
    ):
        args: argparse.Namespace = cli.build_parser().parse_args(argv)
        with pytest.raises(Started):
            args.func(args)
    assert [c["admin_endpoints"] for c in calls] == [False, True]
    assert [c["settings"].deterministic for c in calls] == [False, True]
    assert [c["startup_timeout_s"] for c in calls] == [DEFAULT_STARTUP_TIMEOUT_S, 90.0]


@pytest.mark.vllm
@pytest.mark.timeout(DEFAULT_STARTUP_TIMEOUT_S + 400)
async def test_engine_serve_prints_its_model_and_sigterm_stops_all_and_reaches_the_caller() -> None:
    """One real server, started by `kalypso engine serve` with this process's environment
    asking for admin endpoints: it prints the server's cost model; the admin endpoints
    answer 404 (they are off unless `--admin-endpoints`); a client naming another model is
    refused with the one served. SIGTERM mid-request stops the server and everything it
    started, the request fails with an EngineError naming it, the command exits 0, and
    nothing answers on the port. (A group whose leader died first is stopped too:
    test_stop_process_group_stops_children_of_a_dead_leader.)"""
    from kalypso.engine.vllm_http import HTTPVLLMEngine
    from kalypso.engine.vllm_server import free_port

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "kalypso.cli", "engine", "serve", "--port", str(port),
               "--deterministic", "--kv-cache-bytes", "64MiB", "--max-num-seqs", "8"]  # fmt: skip
    serve = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, ADMIN_ENV_VAR: "1"},
    )
    assert serve.stderr is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + DEFAULT_STARTUP_TIMEOUT_S + 120
        while time.monotonic() < deadline and not any("cost model:" in x for x in lines):
            line = await asyncio.to_thread(serve.stderr.readline)
            if not line:
                break
            lines.append(line)
        model = next((x for x in lines if "cost model:" in x), "")
        assert "ms a step" in model and "us a prefill token" in model, "".join(lines[-20:])
        assert "at most 2,048 tokens and 8 sequences a step" in model
        server_pid = int(next(x for x in lines if "(pid " in x).split("(pid ")[1].split(",")[0])
        members = psutil.Process(server_pid).children(recursive=True)
        assert members, "the API server has no engine core process"
        for path in ("/collective_rpc", "/server_info", "/reset_prefix_cache"):
            response = httpx.post(f"{base_url}{path}", json={"method": "noop"}, timeout=10)
            assert response.status_code == 404, path
        with pytest.raises(EngineError, match=r"does not serve model 'other'.*kalypso-smollm2"):
            await HTTPVLLMEngine.connect(base_url, "other")
        engine = await HTTPVLLMEngine.connect(base_url)
        try:
            with pytest.raises(UnsupportedFeatureError, match="--admin-endpoints"):
                await engine.reset_prefix_cache()
            in_flight = await start_long_request(engine)
            serve.send_signal(signal.SIGTERM)
            with pytest.raises(EngineError, match="doomed"):
                await in_flight
        finally:
            await engine.close()
        assert await asyncio.to_thread(serve.wait, 120) == 0
        assert _wait_gone(server_pid, 30.0)
        for member in members:
            assert _wait_gone(member.pid, 30.0), f"{member} survived"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGKILL)
    with pytest.raises(EngineError):
        await HTTPVLLMEngine.connect(base_url)
