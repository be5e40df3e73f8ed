"""Bad input and failure: clear errors, nothing left running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from kalypso.cli import main as cli_main
from kalypso.engine.protocol import EngineError
from kalypso.models import MARKER_FILENAME, ModelNotReadyError, resolve_model
from tests.conftest import conformance_vllm_settings, long_request, start_long_request

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


@pytest.mark.vllm
async def test_local_engine_core_death_reaches_the_caller() -> None:
    """Killing the engine core mid-request fails that request and every later one with an
    EngineError, and close() leaves no process of the engine behind (so the engines the
    rest of the suite starts find the machine as it was)."""
    from kalypso.engine.vllm_local import LocalVLLMEngine

    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    engine = await LocalVLLMEngine.start(conformance_vllm_settings())
    try:
        in_flight = await start_long_request(engine)
        for child in psutil.Process().children(recursive=True):
            if child.pid not in children_before:
                child.kill()
        with pytest.raises(EngineError, match="doomed"):
            await asyncio.wait_for(in_flight, timeout=120)
        with pytest.raises(EngineError):
            await engine.generate(long_request("after", engine))
    finally:
        await engine.close()
    # bounded wait, not a timing assertion: a loaded host may take a while to reap them
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in children_before]
    _, leftover = psutil.wait_procs(started, timeout=30)
    assert [p for p in leftover if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
