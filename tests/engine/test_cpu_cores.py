"""Cores of their own for vLLM CPU engines: the slices, the variable set only while an
engine starts, the settings' check and key, a server's environment, and which engines
``open_engines`` gives slices to (vLLM itself is not started here: see
``test_cpu_cores_vllm.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kalypso.cli import main as cli_main
from kalypso.engine import open as open_module
from kalypso.engine.cpu_cores import VLLM_CPU_BIND_ENV, bound_to, core_slices, parse_cores
from kalypso.engine.open import EngineSpec, open_engines
from kalypso.engine.protocol import EngineError
from kalypso.engine.vllm_server import VLLMServer
from kalypso.engine.vllm_settings import VLLMSettings, calibration_key


def test_slices_are_disjoint_contiguous_and_differ_by_at_most_one_core() -> None:
    assert core_slices(2, [7, 3, 4, 5, 6]) == [(3, 4, 5), (6, 7)]
    assert core_slices(3, range(6)) == [(0, 1), (2, 3), (4, 5)]
    assert core_slices(1, [2, 0]) == [(0, 2)]
    assert core_slices(1) == [tuple(sorted(os.sched_getaffinity(0)))]


@pytest.mark.parametrize(
    ("count", "cores", "message"),
    [
        (0, [0, 1], "count must be 1 to 2"),
        (3, [0, 1], "count must be 1 to 2"),
        (1, [0, 0], "cores repeat one"),
        (1, [], "count must be 1 to 0"),
    ],
)
def test_bad_counts_and_cores_are_refused(count: int, cores: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        core_slices(count, cores)


def test_the_binding_is_set_only_within_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv(VLLM_CPU_BIND_ENV, raising=False)
    with bound_to(allowed):
        assert os.environ[VLLM_CPU_BIND_ENV] == ",".join(map(str, allowed))
    assert VLLM_CPU_BIND_ENV not in os.environ
    monkeypatch.setenv(VLLM_CPU_BIND_ENV, "auto")
    with pytest.raises(RuntimeError), bound_to(allowed[-1:]):
        assert os.environ[VLLM_CPU_BIND_ENV] == str(allowed[-1])
        raise RuntimeError
    assert os.environ[VLLM_CPU_BIND_ENV] == "auto"
    with bound_to(None):
        assert os.environ[VLLM_CPU_BIND_ENV] == "auto"


@pytest.mark.parametrize("cores", [(), (-1,), (1, 1)])
def test_settings_refuse_bad_cores(cores: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="cpu_cores must be distinct core ids"):
        VLLMSettings(cpu_cores=cores)


def test_a_cost_model_is_kept_per_number_of_cores() -> None:
    def key(cores: tuple[int, ...] | None) -> dict[str, object]:
        return calibration_key(VLLMSettings(cpu_cores=cores), "m", "vllm")

    assert key((0,)) == key((1,))
    assert len({str(key(c)) for c in [None, (0,), (0, 1)]}) == 3


def test_a_server_started_on_cores_has_them_in_its_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    launched: list[dict[str, str]] = []

    class Launched(Exception):
        pass

    def launch(cmd: list[str], *, stdout: Any, env: dict[str, str]) -> None:
        launched.append(env)
        raise Launched

    monkeypatch.setattr("kalypso.engine.vllm_server.launch_process_group", launch)
    monkeypatch.setenv(VLLM_CPU_BIND_ENV, "auto")
    last = max(os.sched_getaffinity(0))
    for cores in [(last,), None]:
        with pytest.raises(Launched):
            VLLMServer.start(VLLMSettings(cpu_cores=cores), log_path=tmp_path / "log")
    assert [env[VLLM_CPU_BIND_ENV] for env in launched] == [str(last), "auto"]
    outside = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(ValueError, match=rf"cpu_cores \[{outside}\] are not among"):
        VLLMServer.start(VLLMSettings(cpu_cores=(0, outside)), log_path=tmp_path / "log")
    assert len(launched) == 2  # refused before anything started


async def test_an_in_process_engine_on_a_core_it_may_not_use_is_refused_before_starting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kalypso.engine.vllm_local import LocalVLLMEngine

    monkeypatch.delenv(VLLM_CPU_BIND_ENV, raising=False)
    outside = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(ValueError, match="are not among this process's cores"):
        await LocalVLLMEngine.start(VLLMSettings(deterministic=True, cpu_cores=(outside,)))
    assert VLLM_CPU_BIND_ENV not in os.environ


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EngineSpec]]:
    """``open_engine`` recording the specs it is given, on a CPU build of vLLM with cores
    0 to 2 and no binding in the environment."""
    specs: list[EngineSpec] = []

    async def open_engine(spec: EngineSpec, *, log_path: Path | None = None) -> Any:
        specs.append(spec)
        return _Closable()

    monkeypatch.setattr(open_module, "open_engine", open_engine)
    monkeypatch.setattr(open_module, "_vllm_runs_on_cpu", lambda: True)
    monkeypatch.setattr(open_module, "allowed_cores", lambda: [0, 1, 2])
    monkeypatch.delenv(VLLM_CPU_BIND_ENV, raising=False)
    yield specs


class _Closable:
    async def close(self) -> None:
        return None


def _cores(specs: list[EngineSpec]) -> list[tuple[int, ...] | None]:
    return [s.settings.cpu_cores for s in specs]


@pytest.mark.parametrize("kind", ["vllm", "http"])
async def test_several_vllm_cpu_engines_started_here_get_cores_of_their_own(
    opened: list[EngineSpec], kind: str
) -> None:
    await open_engines(EngineSpec(kind=kind), 2)
    assert _cores(opened) == [(0, 1), (2,)]


async def test_engines_keep_vllms_choice_when_told_or_too_many(
    opened: list[EngineSpec], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await open_engines(EngineSpec(kind="vllm"), 1)  # one engine
    await open_engines(EngineSpec(kind="vllm", settings=VLLMSettings(cpu_cores=(2,))), 2)
    await open_engines(EngineSpec(kind="http"), 2, urls=["http://a:1", "http://b:1"])
    await open_engines(EngineSpec(kind="vllm"), 4)  # more engines than cores
    assert "4 vLLM CPU engines on 3 cores" in caplog.text
    monkeypatch.setenv(VLLM_CPU_BIND_ENV, "0")  # the environment says
    await open_engines(EngineSpec(kind="vllm"), 2)
    monkeypatch.delenv(VLLM_CPU_BIND_ENV)
    monkeypatch.setattr(open_module, "_vllm_runs_on_cpu", lambda: False)  # a GPU build
    await open_engines(EngineSpec(kind="vllm"), 2)
    assert _cores(opened) == [None, (2,), (2,), *[None] * (2 + 4 + 2 + 2)]


@pytest.mark.parametrize(
    ("text", "cores"), [("0", (0,)), ("2-3", (2, 3)), (" 0, 2-4 ", (0, 2, 3, 4)), ("5-5", (5,))]
)
def test_cores_are_read_as_ids_and_ranges(text: str, cores: tuple[int, ...]) -> None:
    assert parse_cores(text) == cores


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "ids and ranges"),
        ("0,", "ids and ranges"),
        ("a", "ids and ranges"),
        ("-1", "ids and ranges"),
        ("1-", "ids and ranges"),
        ("3-1", "runs backwards"),
        ("0,0-1", "names a core twice"),
    ],
)
def test_bad_cores_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cores(text)


def test_engine_serve_starts_its_server_with_the_cores_and_budget_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[VLLMSettings] = []

    def start(settings: VLLMSettings, **kwargs: Any) -> None:
        started.append(settings)
        raise EngineError("stopped here")

    monkeypatch.setattr(VLLMServer, "start", start)
    last = max(os.sched_getaffinity(0))
    assert cli_main(["engine", "serve", "--cpu-cores", str(last)]) == 2
    assert cli_main(["engine", "serve", "--max-num-batched-tokens", "8192"]) == 2
    assert [(s.cpu_cores, s.max_num_batched_tokens) for s in started] == [
        ((last,), 2048),
        (None, 8192),
    ]
    for flag, bad, message in [
        ("--cpu-cores", "x", "ids and ranges"),
        ("--cpu-cores", str(last + 1), "not among this process"),
        ("--max-num-batched-tokens", "0", "a whole number >= 1"),
        ("--max-num-seqs", "-3", "a whole number >= 1"),
    ]:
        with pytest.raises(SystemExit) as exited:
            cli_main(["engine", "serve", flag, bad])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert len(started) == 2  # refused before a server starts
