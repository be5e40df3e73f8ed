"""Two in-process vLLM CPU engines opened together (``open_engines``, what ``--replicas 2
--engine vllm`` runs) compute on cores of their own, answer alike, and leave no process
behind when closed."""

from __future__ import annotations

import os

import psutil
import pytest

from kalypso.engine.cpu_cores import VLLM_CPU_BIND_ENV
from kalypso.engine.open import EngineSpec, close_engines, open_engines
from kalypso.engine.protocol import GenerateRequest
from tests.conftest import deterministic_vllm_settings

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


def _workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "VLLM::Worker"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
async def test_two_engines_opened_together_compute_on_cores_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(VLLM_CPU_BIND_ENV, raising=False)  # as outside the test suite
    allowed = sorted(os.sched_getaffinity(0))
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    spec = EngineSpec(kind="vllm", settings=deterministic_vllm_settings(16, max_num_seqs=1))
    engines = await open_engines(spec, 2)
    try:
        half = len(allowed) // 2 + len(allowed) % 2
        first, second = sorted(sorted(w.cpu_affinity()) for w in _workers())
        assert set(first) <= set(allowed[:half]) and set(second) <= set(allowed[half:])
        prompt = tuple(engines[0].tokenizer.encode("The capital of France is"))
        answers = [
            (await e.generate(GenerateRequest(f"r{n}", prompt, 8))).output_token_ids
            for n, e in enumerate(engines)
        ]
        assert answers[0] == answers[1]
    finally:
        await close_engines(engines)
    # bounded wait, not a timing assertion: a loaded host may take a while to reap them
    started = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in children_before and not _is_resource_tracker(p)
    ]
    _, leftover = psutil.wait_procs(started, timeout=30)
    assert [
        p.cmdline() for p in leftover if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ] == []


def _is_resource_tracker(process: psutil.Process) -> bool:
    """Python's multiprocessing helper, started by the first process this interpreter
    spawns and kept until it exits: no engine's."""
    try:
        return any("multiprocessing.resource_tracker" in part for part in process.cmdline())
    except psutil.Error:  # gone, or a zombie: no helper of the interpreter
        return False
