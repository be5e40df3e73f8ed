"""Bad input and failure: clear errors, nothing left running, the next engine starts."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import psutil
import pytest

from kalypso.cli import main as cli_main
from kalypso.engine.protocol import Engine, EngineError, GenerateRequest, GenerateResult
from kalypso.models import MARKER_FILENAME, ModelNotReadyError, resolve_model
from tests.conftest import conformance_vllm_settings, poll_stats_until

pytestmark = pytest.mark.timeout(600)


def test_missing_bundled_model_names_the_fixing_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KALYPSO_CACHE_DIR", str(tmp_path))
    with pytest.raises(ModelNotReadyError, match="kalypso models prepare"):
        resolve_model()


def test_half_converted_model_names_the_fixing_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KALYPSO_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "models" / "smollm2-135m-instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    with pytest.raises(ModelNotReadyError, match=rf"{MARKER_FILENAME}.*kalypso models prepare"):
        resolve_model()


def test_cli_reports_missing_model_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KALYPSO_CACHE_DIR", str(tmp_path))
    assert cli_main(["engine", "serve"]) == 2
    err = capsys.readouterr().err
    assert "kalypso models prepare" in err
    assert "Traceback" not in err


def test_local_folder_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotReadyError, match=r"config\.json"):
        resolve_model(str(tmp_path))


async def test_unreachable_server_names_the_url() -> None:
    from kalypso.engine.vllm_http import HTTPVLLMEngine
    from kalypso.engine.vllm_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match=url):
        await HTTPVLLMEngine.connect(url)


def _long_request(request_id: str, engine: Engine) -> GenerateRequest:
    """A request that decodes as many tokens as the context holds (tens of seconds on CPU)."""
    prompt = tuple(range(100, 400))
    max_tokens = engine.capacity.max_model_len_tokens - len(prompt) - 8
    return GenerateRequest(request_id, prompt, max_tokens=max_tokens, ignore_eos=True)


async def _start_long_request(engine: Engine) -> asyncio.Future[GenerateResult]:
    """Send the doomed request and return once the engine reports it running: the kill
    that follows then lands mid-request on any machine, however fast or loaded."""
    in_flight = asyncio.ensure_future(engine.generate(_long_request("doomed", engine)))
    await poll_stats_until(
        lambda s: s.running_requests >= 1, engine, in_flight.done, max_polls=6000
    )
    assert not in_flight.done(), "the long request finished before the engine was killed"
    return in_flight


@pytest.mark.vllm
async def test_server_wrong_model_and_death_reach_the_caller() -> None:
    from kalypso.engine.vllm_http import HTTPVLLMEngine
    from kalypso.engine.vllm_server import VLLMServer, running_server

    server = VLLMServer.start(conformance_vllm_settings())
    try:
        with pytest.raises(EngineError, match=r"does not serve model 'other'.*kalypso-smollm2"):
            await HTTPVLLMEngine.connect(server.base_url, "other")
        engine = await HTTPVLLMEngine.connect(server.base_url)
        in_flight = await _start_long_request(engine)
        os.killpg(server.pid, signal.SIGKILL)
        with pytest.raises(EngineError, match="doomed"):
            await in_flight
        await engine.close()
    finally:
        server.stop()
    assert server.process.poll() is not None
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == "zombie"
    # the next server starts and serves
    with running_server(conformance_vllm_settings()) as again:
        engine = await HTTPVLLMEngine.connect(again.base_url)
        result = await engine.generate(GenerateRequest("alive", tuple(range(100, 140)), 2))
        assert result.finish_reason in ("stop", "length")
        await engine.close()


@pytest.mark.vllm
async def test_local_engine_core_death_reaches_the_caller() -> None:
    from kalypso.engine.vllm_local import LocalVLLMEngine

    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    engine = await LocalVLLMEngine.start(conformance_vllm_settings())
    try:
        in_flight = await _start_long_request(engine)
        for child in psutil.Process().children(recursive=True):
            if child.pid not in children_before:
                child.kill()
        with pytest.raises(EngineError, match="doomed"):
            await asyncio.wait_for(in_flight, timeout=120)
        with pytest.raises(EngineError):
            await engine.generate(_long_request("after", engine))
    finally:
        await engine.close()
    # bounded wait, not a timing assertion: a loaded host may take a while to reap them
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in children_before]
    _, leftover = psutil.wait_procs(started, timeout=30)
    assert [p for p in leftover if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    # the next engine starts and serves
    engine = await LocalVLLMEngine.start(conformance_vllm_settings())
    try:
        result = await engine.generate(GenerateRequest("alive", tuple(range(100, 140)), 2))
        assert result.finish_reason in ("stop", "length")
    finally:
        await engine.close()
