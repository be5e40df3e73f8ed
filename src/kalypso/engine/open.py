"""One way to get an engine for a command: vLLM in-process, a vLLM server this process
starts (and stops), a running server at a URL, or the simulator.

:func:`open_engine` returns an engine whose ``close()`` stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kalypso.engine.cpu_cores import VLLM_CPU_BIND_ENV, allowed_cores, bind_value, core_slices
from kalypso.engine.protocol import Engine, EngineError
from kalypso.engine.quiet import output_to
from kalypso.engine.vllm_settings import DEFAULT_KV_CACHE_BYTES, VLLMSettings, calibration_key
from kalypso.models import BUNDLED_MODEL_NAME, resolve_model

logger = logging.getLogger(__name__)

ENGINE_KINDS = ("vllm", "http", "sim")


class EngineFlagsError(ValueError):
    """A command's engine flags contradict each other (the message names them)."""


@dataclass(frozen=True)
class EngineSpec:
    """Which engine to open.

    Attributes:
        kind: ``"vllm"`` (in-process), ``"http"`` (a server started here, stopped on
            close; or the one at ``url``), ``"sim"`` (the simulator).
        settings: vLLM's settings (``vllm`` and a started ``http`` server).
        url: a running server to connect to (``http``; it must have been started with
            admin endpoints for prefix-cache resets).
        sim_profile: the simulator's cost profile; ``sim_blocks`` and
            ``sim_block_size_tokens`` override its capacity, ``sim_max_num_seqs`` its
            most requests running at once (the simulator's default, 256).
        sim_output_tokens: ``(fewest, most)`` tokens of the simulator's free-form answers
            (before ``max_tokens`` cuts them); default: :class:`SimOutputModel`'s, 8 to 48.
            Set it from a real run's tokens per call to simulate that run's outputs.
        pinning: start vLLM with the pinning scheduler (explicit pinning).
        lspf: engines take waiting requests longest cached prefix first (vLLM's
            :mod:`~kalypso.engine.vllm_lspf` scheduler class; the simulator's
            ``waiting_order="lspf"``); not with ``pinning``.
    """

    kind: str = "vllm"
    settings: VLLMSettings = field(default_factory=VLLMSettings)
    url: str | None = None
    sim_profile: str = "smollm2-cpu"
    sim_blocks: int | None = None
    sim_block_size_tokens: int | None = None
    sim_max_num_seqs: int = 256
    sim_output_tokens: tuple[int, int] | None = None
    pinning: bool = False
    lspf: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine kind must be one of {ENGINE_KINDS}, got {self.kind!r}")
        if self.pinning and self.lspf:
            raise ValueError("explicit pinning and LSPF use different vLLM scheduler classes")
        if self.sim_max_num_seqs < 1:
            raise ValueError(f"sim_max_num_seqs must be >= 1, got {self.sim_max_num_seqs}")
        if self.sim_output_tokens is not None:
            fewest, most = self.sim_output_tokens
            if not 1 <= fewest <= most:
                raise ValueError(
                    f"sim_output_tokens must be (fewest, most) with 1 <= fewest <= most,"
                    f" got {self.sim_output_tokens}"
                )


class ServerOwningEngine:
    """An HTTP engine that also stops the server it was started with."""

    def __init__(self, engine: Engine, server: Any) -> None:
        self._engine = engine
        self.server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def close(self) -> None:
        try:
            await self._engine.close()
        finally:
            await asyncio.to_thread(self.server.stop)


def _sim_engine(spec: EngineSpec, **shared: Any) -> Engine:
    """The simulator ``spec`` names; ``shared``: a clock, tokenizer and continuations
    shared with other replicas (see :func:`open_engines`)."""
    from kalypso.engine.sim import SimEngine
    from kalypso.engine.sim.outputs import SimOutputModel

    outputs = None
    if spec.sim_output_tokens is not None:
        fewest, most = spec.sim_output_tokens
        outputs = SimOutputModel(min_output_tokens=fewest, max_output_tokens=most)
    return SimEngine(
        spec.sim_profile,
        outputs=outputs,
        num_blocks=spec.sim_blocks,
        block_size_tokens=spec.sim_block_size_tokens,
        waiting_order="lspf" if spec.lspf else "priority",
        max_num_seqs=spec.sim_max_num_seqs,
        **shared,
    )


async def open_engine(spec: EngineSpec, *, log_path: Path | None = None) -> Engine:
    """The engine ``spec`` names, started or connected. With ``log_path``, vLLM's output
    (start-up logs, warnings, and the engine process's for its whole life) goes to that
    file instead of the terminal.

    Raises:
        EngineError: it could not be started or reached (the message says why).
        kalypso.models.ModelNotReadyError: the bundled model is not prepared.
    """
    settings = spec.settings
    if spec.pinning:
        from kalypso.engine.vllm_pinning import PINNING_SCHEDULER_CLS

        settings = VLLMSettings(**{**settings.__dict__, "scheduler_cls": PINNING_SCHEDULER_CLS})
    if spec.lspf:
        from kalypso.engine.vllm_lspf import LSPF_SCHEDULER_CLS

        settings = VLLMSettings(**{**settings.__dict__, "scheduler_cls": LSPF_SCHEDULER_CLS})
    if spec.kind == "sim":
        return _sim_engine(spec)
    if spec.kind == "vllm":
        with output_to(log_path):
            from kalypso.engine.vllm_local import LocalVLLMEngine

            return await LocalVLLMEngine.start(settings)
    from kalypso.engine.vllm_http import HTTPVLLMEngine

    if spec.url:
        return await HTTPVLLMEngine.connect(
            spec.url,
            pinning=spec.pinning,
            cost_model=settings.cost_model,
            calibrate=settings.calibrate,
        )
    from kalypso.engine.vllm_server import VLLMServer

    server = await asyncio.to_thread(VLLMServer.start, settings, admin_endpoints=True)
    try:
        engine = await HTTPVLLMEngine.connect(
            server.base_url,
            pinning=spec.pinning,
            max_running_requests=settings.max_num_seqs,
            max_step_tokens=settings.max_num_batched_tokens,
            cost_model=settings.cost_model,
            calibrate=settings.calibrate,
            calibration_key=calibration_key(settings, resolve_model(settings.model), "vllm-http"),
        )
    except BaseException:
        await asyncio.to_thread(server.stop)
        raise
    logger.info("started a vLLM server at %s (pid %d)", server.base_url, server.pid)
    return ServerOwningEngine(engine, server)


async def open_engines(
    spec: EngineSpec,
    count: int = 1,
    *,
    urls: Sequence[str] = (),
    log_path: Path | None = None,
) -> list[Engine]:
    """The engines of a replica set: one per URL of ``urls`` (running servers, an
    existing fleet; ``spec.kind`` must be ``"http"``), else ``count`` engines of ``spec``.
    Simulators share one virtual clock (they run side by side, as replicas on their own
    GPUs do), one tokenizer and one record of cut answers; vLLM engines and servers are
    started one after another, each logging to ``log_path`` with ``-r<N>`` before its
    suffix. Several vLLM CPU engines started here compute on cores of their own
    (:func:`_on_cores_of_their_own`). Either every engine is returned or none is left open.

    Raises:
        ValueError: ``count`` < 1, or ``urls`` with another kind or another count.
        EngineError: an engine could not be started or reached.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if urls and spec.kind != "http":
        raise ValueError(f"server URLs are for the http engine, not {spec.kind!r}")
    if urls and count not in (1, len(urls)):
        raise ValueError(f"{len(urls)} server URLs for {count} replicas")
    if spec.kind == "sim" and count > 1:
        from kalypso.engine.sim.clock import SharedClock
        from kalypso.engine.sim.tokenizer import WordTokenizer

        shared: dict[str, Any] = {
            "clock": SharedClock(),
            "tokenizer": WordTokenizer(),
            "continuations": {},
        }
        return [_sim_engine(spec, **shared) for _ in range(count)]
    specs = [replace(spec, url=url) for url in urls] or _on_cores_of_their_own(spec, count)
    opened: list[Engine] = []
    try:
        for number, one in enumerate(specs):
            log = log_path
            if log_path is not None and len(specs) > 1:
                log = log_path.with_name(f"{log_path.stem}-r{number}{log_path.suffix}")
            opened.append(await open_engine(one, log_path=log))
    except BaseException:
        with contextlib.suppress(Exception):  # the start's own error is the one to raise
            await close_engines(opened)
        raise
    return opened


def _on_cores_of_their_own(spec: EngineSpec, count: int) -> list[EngineSpec]:
    """``count`` copies of ``spec``; when they start vLLM for CPU here and neither the
    settings nor the environment say which cores it computes on, each gets a slice of
    this process's cores (:mod:`kalypso.engine.cpu_cores`): vLLM would bind them all to
    the same cores. More engines than cores keep vLLM's choice (logged)."""
    settings = spec.settings
    if (
        count == 1  # the simulator's several engines are opened before this
        or spec.url
        or settings.cpu_cores is not None
        or VLLM_CPU_BIND_ENV in os.environ
        or not _vllm_runs_on_cpu()
    ):
        return [spec] * count
    cores = allowed_cores()
    if count > len(cores):
        logger.warning(
            "%d vLLM CPU engines on %d cores: they compute on the cores vLLM picks, the same"
            " for all",
            count,
            len(cores),
        )
        return [spec] * count
    slices = core_slices(count, cores)
    logger.info("vLLM CPU engines on cores %s", " | ".join(map(bind_value, slices)))
    return [replace(spec, settings=replace(settings, cpu_cores=share)) for share in slices]


def _vllm_runs_on_cpu() -> bool:
    """vLLM is installed and built for CPUs."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


async def close_engines(engines: Sequence[Engine]) -> None:
    """Close every engine of ``engines``, even when one fails to; the first error is
    raised after all were tried."""
    closed = await asyncio.gather(*(engine.close() for engine in engines), return_exceptions=True)
    for outcome in closed:
        if isinstance(outcome, BaseException):
            raise outcome


__all__ = [
    "ENGINE_KINDS",
    "EngineError",
    "EngineFlagsError",
    "EngineSpec",
    "ServerOwningEngine",
    "close_engines",
    "open_engine",
    "open_engines",
]


def parse_size_bytes(text: str) -> int:
    """A command line's size: ``"256MiB"``, ``"0.1GiB"``, ``"64MB"``, ``"50000000"`` -> bytes.

    Raises:
        argparse.ArgumentTypeError: not a size (argparse prints the message as given).
    """
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
    lowered = text.strip().lower()
    try:
        for suffix, factor in units.items():
            if lowered.endswith(suffix):
                return int(float(lowered[: -len(suffix)]) * factor)
        return int(lowered)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (try 64MiB)") from None


def parse_count(text: str) -> int:
    """A command line's whole number of at least 1 (sequences, tokens a step).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints the message as given).
    """
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def add_vllm_limits(parser: argparse.ArgumentParser) -> None:
    """``--max-num-seqs`` and ``--max-num-batched-tokens``: the vLLM engine's batch
    limits, which Kalypso passes explicitly (its defaults suit 2 CPU cores; on a GPU give
    vLLM's own for the device, docs/engines.md)."""
    defaults = VLLMSettings()
    parser.add_argument(
        "--max-num-seqs",
        type=parse_count,
        default=defaults.max_num_seqs,
        help="vLLM: most requests running at once (default %(default)s; vLLM's own on an"
        " 80 GB H100: 1024)",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=parse_count,
        default=defaults.max_num_batched_tokens,
        help="vLLM: tokens an engine step computes (default %(default)s; vLLM's own on an"
        " 80 GB H100 server: 8192)",
    )


def add_engine_arguments(parser: argparse.ArgumentParser, *, replicas: bool = False) -> None:
    """The flags that choose an engine, for commands that run on one (``kalypso workflow
    run``, ``kalypso batch run``); :func:`engine_spec` reads them. With ``replicas``,
    ``--replicas N`` and a repeatable ``--url`` choose several (:func:`replica_count`,
    :func:`replica_urls`)."""
    parser.add_argument("--engine", choices=ENGINE_KINDS, default="vllm")
    if replicas:
        parser.add_argument(
            "--url",
            action="append",
            default=None,
            help="a running vLLM server (with --engine http); repeat it for a replica set",
        )
        parser.add_argument(
            "--replicas",
            type=int,
            default=None,
            help="run on this many engines of --engine (default 1, or one per --url)",
        )
    else:
        parser.add_argument(
            "--url", default=None, help="a running vLLM server (with --engine http)"
        )
    parser.add_argument("--sim-profile", default="qwen3-8b-h100")
    parser.add_argument(
        "--model",
        default=BUNDLED_MODEL_NAME,
        help="vLLM started here (--engine vllm, or http without --url): 'bundled' (default),"
        " a local model folder or a Hugging Face id",
    )
    add_vllm_limits(parser)
    parser.add_argument(
        "--kv-cache-bytes",
        type=parse_size_bytes,
        default=DEFAULT_KV_CACHE_BYTES,
        help="vLLM's KV cache, e.g. 64MiB (default %(default)s bytes)",
    )
    parser.add_argument("--block-size", type=int, default=32, help="KV block size in tokens")
    parser.add_argument("--deterministic", action="store_true", help="float32 (same answers)")


def engine_spec(args: argparse.Namespace) -> EngineSpec:
    """The engine :func:`add_engine_arguments`' flags chose."""
    settings = VLLMSettings(
        model=args.model,
        kv_cache_bytes=args.kv_cache_bytes,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size_tokens=args.block_size,
        deterministic=args.deterministic,
    )
    urls = replica_urls(args)
    return EngineSpec(
        kind=args.engine,
        settings=settings,
        url=urls[0] if len(urls) == 1 else None,
        sim_profile=args.sim_profile,
    )


def replica_urls(args: argparse.Namespace) -> list[str]:
    """The servers :func:`add_engine_arguments`' ``--url`` named (none, one or several)."""
    urls = args.url
    if urls is None:
        return []
    return [urls] if isinstance(urls, str) else list(urls)


def replica_count(args: argparse.Namespace) -> int:
    """How many engines the flags ask for: ``--replicas``, else one per ``--url``, else 1.

    Raises:
        EngineFlagsError: ``--replicas`` below 1, or URLs given with another engine kind
            or a count other than theirs.
    """
    urls = replica_urls(args)
    count = getattr(args, "replicas", None)
    if count is not None and count < 1:
        raise EngineFlagsError(f"--replicas must be at least 1, got {count}")
    if urls and args.engine != "http":
        raise EngineFlagsError(f"--url is for --engine http, not --engine {args.engine}")
    if urls and count is not None and count != len(urls):
        raise EngineFlagsError(f"--replicas {count} with {len(urls)} --url servers")
    return count or max(1, len(urls))
