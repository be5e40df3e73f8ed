"""The batch benchmark: one generated batch file (:mod:`bench.batch_files`) through three
systems on one engine configuration, side by side.

On real vLLM (``--engine vllm``), the same installed vLLM, the same model and settings:

* ``vllm-run-batch``: ``vllm run-batch`` (vLLM's own batch runner; it starts its own
  engine and sends every line at once, in file order); its time is from reading the file
  to writing the outputs, from its log (1 s resolution), without the engine's start;
* ``openai-client``: the file's requests sent through the OpenAI client to a vLLM server,
  at most the server's ``max_num_seqs`` at a time, in file order;
* ``kalypso``: ``kalypso batch run`` on that same server (``--engine http``).

The server's prefix cache is reset between systems. On the simulator (``--engine sim``,
a GPU profile, paper-scale files) the two peers are their schedules on the simulated
engine: every request at once in file order, and ``max_num_seqs`` at a time in file order.

Reported per system: time, prompt and prefill tokens, hit rate, and the fraction of
answers equal to the first system's.

    python -m bench.batch_bench --engine sim --documents 200 --questions 8 --kv-tokens 60000
    python -m bench.batch_bench --engine vllm --documents 12 --questions 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.batch_files import BatchShape, batch_lines, write_batch
from bench.stamp import run_stamp
from kalypso.batch import arun_batch
from kalypso.batch.lower import instance_of, layout_for, prompt_ids
from kalypso.batch.schema import parse_line
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import Engine, GenerateRequest
from kalypso.engine.sim import SimEngine
from kalypso.engine.vllm_server import (
    VLLMServer,
    launch_process_group,
    stop_process_group,
)
from kalypso.engine.vllm_settings import (
    VLLMSettings,
    engine_args,
    engine_cli_args,
    kv_bytes_per_token,
)
from kalypso.models import resolve_model

logger = logging.getLogger(__name__)

SYSTEMS = ("vllm-run-batch", "openai-client", "kalypso")
_LOG_TIME = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")


@dataclass
class SystemRecord:
    """One system's run of the file."""

    system: str
    time_s: float
    requests: int
    prompt_tokens: int
    cached_tokens: int
    answers: dict[str, str]

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def record(self, reference: dict[str, str] | None) -> dict[str, Any]:
        same = None
        if reference is not None:
            same = round(
                sum(self.answers.get(k) == v for k, v in reference.items()) / len(reference), 4
            )
        out = {k: v for k, v in asdict(self).items() if k != "answers"}
        out["time_s"] = round(self.time_s, 3)
        out["prefill_tokens"] = self.prefill_tokens
        out["hit_rate"] = round(self.cached_tokens / self.prompt_tokens, 4)
        out["same_answers"] = same
        return out


def _answers(path: Path) -> tuple[dict[str, str], int, int]:
    answers, prompt, cached = {}, 0, 0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        body = (row.get("response") or {}).get("body") or {}
        if not body.get("choices"):
            continue
        answers[row["custom_id"]] = body["choices"][0]["message"]["content"]
        usage = body.get("usage") or {}
        prompt += int(usage.get("prompt_tokens") or 0)
        cached += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return answers, prompt, cached


# ---- on any engine: the peers' schedules, and Kalypso ---------------------------------
async def _send(engine: Engine, source: Path, width: int | None) -> SystemRecord:
    """Every line in file order, at most ``width`` at a time (None: all at once), the
    prompt as Kalypso renders it."""
    requests = [parse_line(text, n + 1) for n, text in enumerate(source.read_text().splitlines())]
    layout = layout_for(requests[0], engine.tokenizer)
    gate = asyncio.Semaphore(width or len(requests))
    answers: dict[str, str] = {}
    totals = [0, 0]

    async def one(index: int) -> None:
        request = requests[index]
        ids = prompt_ids(request, instance_of(request), layout)
        # no max_tokens: up to the context left, as vLLM's server and Kalypso generate
        cap = request.max_tokens or engine.capacity.max_model_len_tokens - len(ids)
        async with gate:
            result = await engine.generate(
                GenerateRequest(f"peer-{index}", ids, cap, priority=index)
            )
        answers[request.custom_id] = result.text
        totals[0] += result.prompt_tokens
        totals[1] += result.cached_tokens

    started = _clock(engine)
    await asyncio.gather(*(one(i) for i in range(len(requests))))
    name = "vllm-run-batch" if width is None else "openai-client"
    return SystemRecord(
        name, _clock(engine) - started, len(requests), totals[0], totals[1], answers
    )


async def _kalypso(engine: Engine, source: Path, out: Path) -> SystemRecord:
    started = _clock(engine)
    result = await arun_batch(source, out, engine)
    elapsed = _clock(engine) - started
    answers = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        answers[row["custom_id"]] = row["response"]["body"]["choices"][0]["message"]["content"]
    return SystemRecord(
        "kalypso", elapsed, result.requests, result.prompt_tokens, result.cached_tokens, answers
    )


def _clock(engine: Engine) -> float:
    now = getattr(engine, "now_s", None)
    return float(now) if now is not None else time.monotonic()


# ---- real vLLM -------------------------------------------------------------------------
def run_batch_command(settings: VLLMSettings, source: Path, out: Path, name: str) -> list[str]:
    """``vllm run-batch`` with the engine arguments Kalypso's server gets, through its
    module (``vllm``'s console script needs the package's metadata, which a vLLM built
    for CPU from source may lack; the module runs the same runner)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.run_batch",
        "-i",
        str(source),
        "-o",
        str(out),
        *engine_cli_args(engine_args(settings, resolve_model(settings.model))),
        "--served-model-name",
        name,
        "--enable-prompt-tokens-details",
    ]


def _log_span_s(log: str) -> float:
    """Seconds from ``Reading batch from`` to ``Writing outputs`` in run-batch's log."""

    def when(marker: str) -> datetime:
        for line in log.splitlines():
            if marker in line and (found := _LOG_TIME.search(line)):
                return datetime.strptime(found.group(1), "%m-%d %H:%M:%S")
        raise RuntimeError(f"vllm run-batch logged no {marker!r}:\n{log[-2000:]}")

    return (when("Writing outputs") - when("Reading batch from")).total_seconds()


def vllm_run_batch(settings: VLLMSettings, source: Path, work: Path, name: str) -> SystemRecord:
    out, log_path = work / "run-batch.out.jsonl", work / "run-batch.log"
    with log_path.open("wb") as log:
        process = launch_process_group(run_batch_command(settings, source, out, name), stdout=log)
    try:
        code = process.wait(timeout=3600)
    finally:
        stop_process_group(process)
    log_text = log_path.read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"vllm run-batch exited with {code}:\n{log_text[-3000:]}")
    answers, prompt, cached = _answers(out)
    return SystemRecord(
        "vllm-run-batch", _log_span_s(log_text), len(answers), prompt, cached, answers
    )


async def openai_client(base_url: str, name: str, source: Path, width: int) -> SystemRecord:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    lines = [json.loads(text) for text in source.read_text().splitlines()]
    gate = asyncio.Semaphore(width)
    answers: dict[str, str] = {}
    totals = [0, 0]

    async def one(line: dict[str, Any]) -> None:
        async with gate:
            body = {**line["body"], "model": name}
            reply = await client.chat.completions.create(**body, timeout=3600)
        answers[line["custom_id"]] = reply.choices[0].message.content or ""
        if reply.usage is not None:
            totals[0] += reply.usage.prompt_tokens
            details = reply.usage.prompt_tokens_details
            totals[1] += (details.cached_tokens or 0) if details else 0

    started = time.monotonic()
    try:
        await asyncio.gather(*(one(line) for line in lines))
    finally:
        await client.close()
    return SystemRecord(
        "openai-client", time.monotonic() - started, len(lines), totals[0], totals[1], answers
    )


async def real(settings: VLLMSettings, shape: BatchShape, work: Path) -> list[SystemRecord]:
    name = "bench-model"
    source = write_batch(work / "in.jsonl", batch_lines(shape, name))
    records = [vllm_run_batch(settings, source, work, name)]
    server = VLLMServer.start(settings, served_model_name=name, admin_endpoints=True)
    try:
        records.append(await openai_client(server.base_url, name, source, settings.max_num_seqs))
        engine = await open_engine(EngineSpec(kind="http", settings=settings, url=server.base_url))
        try:
            await engine.reset_prefix_cache()
            records.append(await _kalypso(engine, source, work / "kalypso.out.jsonl"))
        finally:
            await engine.close()
    finally:
        server.stop()
    return records


async def simulated(
    profile: str, kv_tokens: int, max_num_seqs: int, shape: BatchShape, work: Path
) -> list[SystemRecord]:
    source = write_batch(work / "in.jsonl", batch_lines(shape, "sim"))
    records = []
    for system in SYSTEMS:
        engine = SimEngine(
            profile, num_blocks=kv_tokens // 16, block_size_tokens=16, max_num_seqs=max_num_seqs
        )
        try:
            if system == "kalypso":
                records.append(await _kalypso(engine, source, work / "kalypso.out.jsonl"))
            else:
                width = None if system == "vllm-run-batch" else max_num_seqs
                records.append(await _send(engine, source, width))
        finally:
            await engine.close()
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--documents", type=int, default=12)
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--document-words", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--sim-profile", default="qwen3-8b-h100")
    parser.add_argument(
        "--kv-tokens", type=int, default=60_000, help="the KV cache (vLLM: float32)"
    )
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="append the records here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    shape = BatchShape(
        args.documents,
        args.questions,
        document_words=args.document_words,
        max_tokens=args.max_tokens,
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.engine == "sim":
            seqs = args.max_num_seqs or 256
            records = asyncio.run(simulated(args.sim_profile, args.kv_tokens, seqs, shape, work))
            engine = f"sim:{args.sim_profile}, {args.kv_tokens:,} KV tokens, {seqs} seqs"
        else:
            per_token = kv_bytes_per_token(resolve_model(), "float32")
            assert per_token is not None
            settings = VLLMSettings(
                deterministic=True,
                max_num_seqs=args.max_num_seqs or 8,
                kv_cache_bytes=args.kv_tokens * per_token,
            )
            records = asyncio.run(real(settings, shape, work))
            engine = (
                f"vLLM (CPU) {settings.model}, float32,"
                f" {args.kv_tokens:,} KV tokens,"
                f" {settings.max_num_seqs} seqs"
            )
    stamp = run_stamp()
    reference = records[0].answers
    rows = [
        {
            **r.record(reference if r is not records[0] else None),
            "file": shape.describe(),
            "engine": engine,
            "date": stamp.date,
            "commit": stamp.commit,
            "host": stamp.host,
        }
        for r in records
    ]
    for row in rows:
        print(
            f"{row['system']:>15}: {row['time_s']:8.2f} s, {row['prompt_tokens']:>9,} prompt,"
            f" {row['prefill_tokens']:>9,} prefill, hit rate {row['hit_rate']:.1%},"
            f" same answers {row['same_answers']}"
        )
    best_peer = min(r.time_s for r in records if r.system != "kalypso")
    kalypso = next(r for r in records if r.system == "kalypso")
    print(
        f"kalypso over the best peer: {best_peer / kalypso.time_s:.2f}x"
        f" ({engine}; {shape.describe()})"
    )
    if args.out is not None:
        existing = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps(existing + rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
