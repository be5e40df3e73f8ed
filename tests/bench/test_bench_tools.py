"""The benchmark runner's records, system names and plots, on the simulator."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from bench import cli
from bench.plots import plot_file
from bench.report import markdown
from bench.runner import (
    cells_agree,
    rows_agree,
    run_systems,
    system_options,
    write_records,
)
from bench.workloads import biodex, contractnli, fever, medec
from kalypso.engine.sim import SimEngine
from kalypso.engine.warm_up import warm_up

REQUIRED = {"workload", "system", "scale", "engine", "kv_cache_tokens", "time_s", "llm_calls",
            "prompt_tokens", "cached_tokens", "prefill_tokens", "min_prefill_tokens",
            "continuations", "continued_tokens", "decisions", "outputs_agree", "requests",
            "output_tokens", "prefill_time_s", "decode_time_s", "stages", "accuracy",
            "accuracy_metric", "quality", "near_ties", "differing_not_near_ties",
            "model", "host"}  # fmt: skip


def test_system_names_map_to_run_options() -> None:
    assert system_options("adaptive") == {"policy": "adaptive"}
    assert system_options("static:0.3+explicit+fixed") == {
        "policy": "static:0.3", "pinning": "explicit", "estimate_bounds": False,
    }  # fmt: skip
    assert system_options("adaptive+fixed:8") == {"policy": "adaptive", "fixed_bound_tokens": 8}
    assert system_options("adaptive+nocap") == {
        "policy": "adaptive", "reserve_cap_when_it_fits": False,
    }  # fmt: skip
    assert system_options("operator-at-a-time+inflight:16") == {
        "policy": "operator-at-a-time", "max_tasks_in_flight": 16,
    }  # fmt: skip
    for bad in ("adaptive+turbo", "adaptive+fixed:0", "adaptive+fixed:x", "adaptive+inflight:0"):
        with pytest.raises(ValueError, match="modifier"):
            system_options(bad)


def test_the_suite_runs_what_the_targets_compare_and_more_runs_the_pinning_and_budgets() -> None:
    suite = ["operator-at-a-time", "adaptive"]
    splits = [f"static:{share}" for share in (0.1, 0.5, 0.9)]
    assert contractnli("quick").suite_systems() == suite + splits
    assert biodex("quick").suite_systems() == suite + splits
    assert medec("quick").suite_systems() == suite
    assert fever("quick").suite_systems() == suite
    more = ["adaptive", "adaptive+explicit"]
    budgets = ["adaptive+fixed:1", "adaptive+fixed:8", "adaptive+fixed:48"]
    assert medec("quick").more_systems() == more + budgets
    assert contractnli("quick").more_systems() == more
    assert biodex("quick").more_systems() == more
    assert fever("quick").more_systems() == more


def test_bench_command_runs_the_suite_and_a_kv_sweep_and_draws_every_figure(
    tmp_path: Path,
) -> None:
    """``python -m bench`` on the simulator: the medec suite at the main KV size, the sweep
    systems at two more sizes, all in one JSON file, and the figures drawn from it; then
    ``--systems more`` into a second file, with its own figures."""
    out = tmp_path / "sweep.json"
    argv = ["--engine", "sim", "--workload", "medec", "--kv-sweep", "0.3,1.0"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    sizes = sorted({row["kv_cache_tokens"] for row in rows})
    assert len(sizes) == 3
    by_size = {kv: [r["system"] for r in rows if r["kv_cache_tokens"] == kv] for kv in sizes}
    assert all(systems == ["operator-at-a-time", "adaptive"] for systems in by_size.values())
    assert all(row["outputs_agree"] for row in rows)
    table = markdown(rows)
    assert table.count("**medec**, KV cache") == 3
    assert "speed-up over" not in table and "| 1.00x |" in table
    stale = tmp_path / "sweep-fig12-budgets.png"  # an earlier run's figure
    stale.write_bytes(b"png")
    names = {p.name for p in plot_file(out)}
    assert names == {f"sweep-{f}.png" for f in ("fig7-time", "fig8-kv-sweep", "fig9-blocking",
                     "prefill")}  # fmt: skip
    assert not stale.exists()

    more = tmp_path / "more.json"
    assert cli.main([*argv[:4], "--systems", "more", "--out", str(more)]) == 0
    more_rows = json.loads(more.read_text())
    assert [r["system"] for r in more_rows] == medec("quick").more_systems()
    assert all(row["outputs_agree"] for row in more_rows)
    fixed_1 = next(r for r in more_rows if r["system"] == "adaptive+fixed:1")
    assert fixed_1["continuations"] > 0
    more_table = markdown(more_rows)
    assert "; speed-up over adaptive" in more_table and "| adaptive | " in more_table
    assert "| 1.00x |" in more_table
    names = {p.name for p in plot_file(more)}
    assert names == {f"more-{f}.png" for f in ("fig7-time", "fig11-pinning", "fig12-budgets",
                     "prefill")}  # fmt: skip

    # a second run starts the file anew and keeps the earlier records beside it
    assert cli.main([*argv[:4], "--systems", "adaptive", "--out", str(out)]) == 0
    assert [row["system"] for row in json.loads(out.read_text())] == ["adaptive"]
    assert json.loads((tmp_path / "sweep.previous.json").read_text()) == rows
    assert cli.main([*argv[:4], "--systems", "adaptive", "--out", str(out), "--append"]) == 0
    assert len(json.loads(out.read_text())) == 2


def test_bench_command_refuses_an_unknown_workload_and_bad_sweep(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    assert cli.main(["--engine", "sim", "--workload", "tpch", "--out", str(out)]) == 2
    with pytest.raises(SystemExit, match="kv-sweep"):
        cli.main(["--engine", "sim", "--kv-sweep", "0,1", "--out", str(out)])
    assert not out.exists()


async def test_records_have_the_documented_fields_and_plots_are_written(tmp_path: Path) -> None:
    workload = medec("quick")
    engine = SimEngine("llama-3.3-70b-4xgpu", num_blocks=600, max_model_len_tokens=9600)
    try:
        records = await run_systems(
            engine, workload, ["operator-at-a-time", "adaptive", "static:0.5"]
        )
    finally:
        await engine.close()
    out = tmp_path / "suite.json"
    write_records(records, out)
    write_records(records[:1], out)  # appends
    rows = json.loads(out.read_text())
    assert len(rows) == 4
    assert set(rows[0]) >= REQUIRED
    assert all(row["outputs_agree"] and row["rows_agree"] for row in rows)
    assert all(row["cells_agree"] == 1.0 for row in rows)
    adaptive = next(r for r in rows if r["system"] == "adaptive")
    assert adaptive["prefill_tokens"] <= 1.1 * adaptive["min_prefill_tokens"]
    # per-phase engine time, per-operator selectivity and answer quality in every record
    assert adaptive["prefill_time_s"] > 0 and adaptive["decode_time_s"] > 0
    assert adaptive["prefill_time_s"] + adaptive["decode_time_s"] >= adaptive["time_s"] * 0.5
    assert adaptive["stages"][0]["rows_in"] == len(workload.table_text)
    assert adaptive["accuracy_metric"] == "flag_accuracy"
    assert 0.0 <= adaptive["accuracy"] <= 1.0
    assert set(adaptive["quality"]) == {"flag_accuracy", "flag_f1", "sentence_accuracy"}
    assert adaptive["output_tokens"] >= adaptive["decisions"]
    written = plot_file(out)
    assert {p.name for p in written} == {
        "suite-fig7-time.png", "suite-fig9-blocking.png", "suite-fig10-splits.png",
        "suite-prefill.png",
    }  # fmt: skip
    assert all(p.stat().st_size > 1000 for p in written)


async def test_the_untimed_warm_run_runs_the_workload_once_more_and_changes_no_record() -> None:
    """On the deterministic simulator a warm run leaves nothing behind that a timed run
    could see: the records are the same with and without it; the engine looked up one
    more run's prompts in place of the few warm-up requests sent without it."""
    workload = medec("quick")
    engine = SimEngine("llama-3.3-70b-4xgpu", num_blocks=600, max_model_len_tokens=9600)
    try:
        await warm_up(engine, workload.table_text)
        warm_up_tokens = (await engine.stats()).prefix_cache_queries_tokens
    finally:
        await engine.close()
    assert warm_up_tokens > 0
    rows, looked_up = {}, {}
    for warm in (False, True):
        engine = SimEngine("llama-3.3-70b-4xgpu", num_blocks=600, max_model_len_tokens=9600)
        try:
            records = await run_systems(
                engine, workload, ["operator-at-a-time", "adaptive"], warm_run=warm
            )
            looked_up[warm] = (await engine.stats()).prefix_cache_queries_tokens
        finally:
            await engine.close()
        rows[warm] = [{k: v for k, v in asdict(r).items() if k != "engine"} for r in records]
    assert rows[True] == rows[False]
    adaptive_prompt_tokens = rows[False][1]["prompt_tokens"]
    assert looked_up[True] - looked_up[False] == adaptive_prompt_tokens - warm_up_tokens


def test_agreement_separates_decisions_from_generated_text() -> None:
    reference = pd.DataFrame({"id": [1, 2], "text": ["a", "b"], "summary": ["x", "y"]})
    other_text = reference.assign(summary=["x", "z"])
    other_rows = pd.DataFrame({"id": [1, 3], "text": ["a", "c"], "summary": ["x", "y"]})
    assert rows_agree(other_text, reference, ["id", "text"])
    assert cells_agree(other_text, reference) == pytest.approx(5 / 6, abs=1e-4)
    assert not rows_agree(other_rows, reference, ["id", "text"])
    assert not rows_agree(reference.head(1), reference, ["id", "text"])
    assert cells_agree(reference.head(1), reference) == 0.0


def test_sweep_sizes_raised_to_a_size_already_run_are_skipped(tmp_path: Path) -> None:
    """FEVER's prompts carry five passages, so its KV floor is above the whole table:
    every sweep size is raised to the main size and nothing is run twice."""
    out = tmp_path / "fever.json"
    argv = ["--engine", "sim", "--workload", "fever", "--kv-sweep", "0.5,1.0"]
    assert cli.main([*argv, "--systems", "adaptive", "--out", str(out)]) == 0
    assert [row["system"] for row in json.loads(out.read_text())] == ["adaptive"]


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "sigint-ignored"])
def test_sigterm_ends_a_bench_run_like_ctrl_c(tmp_path: Path, background: bool) -> None:
    """SIGTERM raises KeyboardInterrupt in the command, so cleanup (closing engines,
    stopping the servers it started) runs instead of the process dying on the spot.

    ``sigint-ignored`` starts the bench the way a non-interactive shell starts ``cmd &``:
    with SIGINT ignored. Re-raising SIGINT did nothing there, and the run went on."""
    import signal
    import subprocess
    import sys

    argv = ["-m", "bench", "--engine", "sim", "--scale", "paper"]
    process = subprocess.Popen(
        [sys.executable, *argv, "--workload", "contractnli", "--out", str(tmp_path / "x.json")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        preexec_fn=_ignore_sigint if background else None,
    )
    try:
        # inside the run: the handler is installed before the first line is printed, and
        # the paper-scale suite then runs for minutes (no sleep: a loaded host is slow)
        assert process.stderr is not None
        first_line = process.stderr.readline()
        assert first_line, "the bench printed nothing before exiting"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # never leave the run behind, even on failure
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signal.SIGTERM, (first_line + stderr)[-2000:]
    assert "Traceback" not in stderr


async def test_warm_up_sends_requests_and_leaves_an_empty_prefix_cache() -> None:
    from kalypso.engine.protocol import GenerateRequest

    texts = [" ".join(f"w{i}x{j}" for j in range(300)) for i in range(6)]
    engine = SimEngine(num_blocks=64, block_size_tokens=16)
    try:
        await warm_up(engine, texts)
        looked_up = (await engine.stats()).prefix_cache_queries_tokens
        prompt = tuple(engine.tokenizer.encode(texts[0])[: engine.capacity.total_tokens // 8])
        again = await engine.generate(GenerateRequest("after", prompt, max_tokens=1))
    finally:
        await engine.close()
    assert looked_up == 4 * len(prompt)  # four requests, each the first 1/8 of the cache
    assert again.cached_tokens == 0  # the warm-up's blocks were dropped


def _gold_frame(workload_name: str) -> pd.DataFrame:
    """The output a perfect system would return (the keys the scorers read)."""
    from bench.datasets import biodex as biodex_data
    from bench.datasets import clinical_notes
    from bench.datasets import contracts as contract_data
    from bench.datasets import fever as fever_data

    if workload_name == "contractnli":
        data = contract_data.generate(n=5, seed=0, target_words=1480, nda_fraction=1.0)
        text = dict(zip(data.hypotheses["hypothesis_id"], data.hypotheses["hypothesis"],
                        strict=True))  # fmt: skip
        rows = [(c, text[h]) for c, labels in zip(data.contracts["contract_id"],
                data.contracts["labels"], strict=True) for h, label in labels.items()
                if label != "not_mentioned"]  # fmt: skip
        return pd.DataFrame(rows, columns=["contract_id", "hypothesis"])
    if workload_name == "medec":
        notes = clinical_notes.generate(n=30, seed=0, error_fraction=0.57)
        flagged = notes[notes["has_error"]]
        sentences = flagged["error_sentence_id"].astype(str)
        return pd.DataFrame({"note_id": flagged["note_id"], "error_sentence": sentences})
    if workload_name == "biodex":
        articles = biodex_data.generate(n=4, seed=0, target_words=2015).articles
        rows = [(a, t) for a, terms in zip(articles["article_id"], articles["reactions"],
                strict=True) for t in terms]  # fmt: skip
        return pd.DataFrame(rows, columns=["article_id", "term"])
    claims = fever_data.generate(n=20, seed=0).claims
    return claims[claims["label"] == "SUPPORTS"][["claim_id"]]


@pytest.mark.parametrize("name", ["contractnli", "medec", "biodex", "fever"])
def test_scorers_give_a_perfect_output_full_marks_and_nothing_none(name: str) -> None:
    from bench.workloads import WORKLOADS

    workload = WORKLOADS[name]("quick")
    perfect = workload.score(_gold_frame(name))
    headline = next(iter(perfect))
    assert perfect[headline] == 1.0
    empty = workload.score(pd.DataFrame())
    assert empty[headline] < 1.0


def test_workflow_bench_gives_the_simulator_the_real_runs_width() -> None:
    """The workflow bench's simulator runs as many requests at once as its vLLM runs (16 by
    default), not the simulator's own default of 256."""
    from bench.workflow_bench import build_parser, engine_spec

    args = build_parser().parse_args(
        ["--engine", "sim", "--sim-profile", "smollm2-cpu-f32", "--sim-kv-tokens", "1408"]
    )
    sim = engine_spec(args, lspf=False)
    assert (sim.sim_blocks, sim.sim_max_num_seqs, sim.sim_output_tokens) == (44, 16, None)
    args.engine = "http"
    assert engine_spec(args, lspf=True).settings.max_num_seqs == 16


def test_workflow_bench_sets_the_simulators_answer_lengths() -> None:
    from bench.workflow_bench import build_parser, engine_spec

    parser = build_parser()
    args = parser.parse_args(["--engine", "sim", "--sim-output-tokens", "6,30"])
    assert engine_spec(args, lspf=False).sim_output_tokens == (6, 30)
    for bad in ("30,6", "0,4", "6", "a,b"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--engine", "sim", "--sim-output-tokens", bad])


def test_workflow_bench_runs_kalypso_with_a_window_of_n_queries() -> None:
    import asyncio

    from bench.workflow_bench import build_parser, is_system, main_async, system_policy

    assert system_policy("kalypso:3")[0] == "cache-aware:3"
    assert system_policy("kalypso-unwindowed")[0] == "cache-aware:unbounded"
    assert is_system("kalypso:1") and is_system("langgraph") and is_system("kalypso")
    for bad in ("kalypso:0", "kalypso:x", "kalypso:", "kalypso:-2", "nope"):
        assert not is_system(bad)
    args = build_parser().parse_args(["--engine", "sim", "--systems", "kalypso,kalypso:0"])
    with pytest.raises(SystemExit, match="kalypso:N"):
        asyncio.run(main_async(args))


@pytest.mark.parametrize(
    ("flags", "engines"),
    [
        ([], [(False, ["kalypso", "all-ready"]), (True, ["kalypso-pinned"])]),
        (["--one-server"], [(True, ["kalypso", "all-ready", "kalypso-pinned"])]),
    ],
)
def test_workflow_bench_gives_pinned_systems_a_server_of_their_own_unless_told(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], engines: list[tuple[bool, list[str]]]
) -> None:
    """Pinned systems need vLLM's pinning scheduler class; ``--one-server`` runs every
    system on one such server, so that pinned and unpinned runs share an engine."""
    import asyncio

    import bench.workflow_bench as workflow_bench

    seen: list[tuple[bool, list[str]]] = []

    async def record(
        spec: object, names: object, systems: list[str], *rest: object, **options: object
    ) -> list[object]:
        seen.append((spec.pinning, systems))  # type: ignore[attr-defined]
        return []

    monkeypatch.setattr(workflow_bench, "bench_engine", record)
    args = workflow_bench.build_parser().parse_args(
        ["--engine", "http", "--systems", "all-ready,kalypso-pinned,kalypso", *flags]
    )
    asyncio.run(workflow_bench.main_async(args))
    assert seen == engines


async def test_langgraph_record_carries_the_servers_counters_over_its_run() -> None:
    """The LangGraph runner records the server's counter deltas (``server_counters.py``,
    as the Lotus and Palimpzest runners do); the record keeps its generated tokens, phase
    times and preemptions, so a gap in time can be traced to decode length or overcommit."""
    from bench.external.server_counters import run_record
    from bench.external_run import ExternalRun
    from bench.workflow_bench import external_record
    from kalypso.workflow.library import workload

    after = {
        "prompt_tokens": 1010.0,
        "cached_tokens": 410.0,
        "llm_calls": 16.0,
        "output_tokens": 130.0,
        "prefill_time_s": 12.5,
        "decode_time_s": 30.25,
        "preemptions": 13.0,
    }
    before = dict.fromkeys(after, 10.0)
    outputs = [{"answer": "x"}]
    measured = run_record(before, after, 7.0, len(outputs), llm_calls=4, outputs=outputs)
    engine = SimEngine(num_blocks=64, block_size_tokens=16)
    run = ExternalRun.model_validate_json(json.dumps(measured))
    record = external_record(engine, workload("mapred", "small"), "small", run, None)
    assert (record.llm_calls, record.prompt_tokens, record.cached_tokens) == (4, 1000, 400)
    assert (record.prefill_tokens, record.output_tokens, record.preemptions) == (600, 120, 3)
    assert (record.prefill_s, record.decode_s, record.time_s) == (2.5, 20.25, 7.0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prompt_tokens": None}, "prompt_tokens"),
        ({"cached_tokens": 12.5}, "cached_tokens"),
        ({"preemptions": -1.0}, "preemptions"),
    ],
)
def test_a_malformed_external_record_is_refused_by_the_field_at_fault(
    change: dict[str, object], field: str
) -> None:
    """A runner whose record lacks a counter, or holds a fractional token count or a
    negative one, fails by name instead of showing as zeros in a table."""
    from pydantic import ValidationError

    from bench.external_run import ExternalRun

    good: dict[str, object] = {
        "time_s": 7.0,
        "llm_calls": 4.0,
        "prompt_tokens": 1000.0,
        "cached_tokens": 400.0,
        "output_tokens": 120.0,
        "prefill_time_s": 2.5,
        "decode_time_s": 20.25,
        "preemptions": 3.0,
        "output_rows": 2,
    }
    assert ExternalRun.model_validate(good).prefill_tokens == 600
    bad = {k: v for k, v in {**good, **change}.items() if v is not None}
    with pytest.raises(ValidationError, match=field):
        ExternalRun.model_validate(bad)


def test_external_runners_start_with_the_hash_seed_that_orders_lotus_columns_text_first() -> None:
    """Lotus orders an instruction's columns by a ``set`` of their names, so by the
    process's string-hash seed; the runners' fixed seed puts ContractNLI's contract
    before its hypothesis (the order whose calls share the contract's prefix). Checked in
    a child process as Lotus's ``parse_cols`` builds it, for both of its instructions."""
    import subprocess
    import sys

    from bench.external_run import RUNNER_HASH_SEED, runner_env

    code = "print(list(set(['text', 'hypothesis'])), list(set(['text:left', 'hypothesis:right'])))"
    env = runner_env()
    assert env["PYTHONHASHSEED"] == RUNNER_HASH_SEED
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['text', 'hypothesis'] ['text:left', 'hypothesis:right']"


def test_a_runner_that_writes_a_malformed_record_is_skipped_with_the_field_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The suite goes on without that baseline; the error names what was missing."""
    import io
    import subprocess
    from types import SimpleNamespace

    from rich.console import Console

    seen_env: list[str] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        env = kwargs["env"]
        assert isinstance(env, dict)
        seen_env.append(env["PYTHONHASHSEED"])
        Path(command[3]).write_text(json.dumps({"time_s": 1.0, "llm_calls": 2.0}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    server = SimpleNamespace(base_url="http://127.0.0.1:1", served_model_name="m")
    out = io.StringIO()
    run = cli._run_external(
        "lotus", Path("python"), SimpleNamespace(server=server), medec(n=2), Console(file=out)
    )
    assert run is None and seen_env == ["4"]
    assert "lotus wrote a malformed record" in out.getvalue()
    assert "prompt_tokens" in out.getvalue()


async def test_batch_peers_generate_as_far_as_kalypso_when_a_line_has_no_max_tokens(
    tmp_path: Path,
) -> None:
    """A line without ``max_tokens`` may generate up to the context left, on vLLM's own
    runner and server as in ``kalypso batch run``; the simulated peers give the same
    answers (their schedule is all that differs)."""
    from bench.batch_bench import _kalypso, _send
    from bench.batch_files import BatchShape, batch_lines, write_batch
    from kalypso.engine.sim import SimEngine, SimOutputModel

    lines = batch_lines(BatchShape(3, 2, document_words=30, fewshot_words=10), "sim")
    for line in lines:
        del line["body"]["max_tokens"]
    source = write_batch(tmp_path / "in.jsonl", lines)

    def engine() -> SimEngine:  # answers longer than any default cap a peer might assume
        return SimEngine(outputs=SimOutputModel(min_output_tokens=40, max_output_tokens=60))

    ours = await _kalypso(engine(), source, tmp_path / "out.jsonl")
    for width in (None, 2):
        peer = await _send(engine(), source, width)
        assert peer.answers == ours.answers, width
        assert all(len(answer.split()) >= 40 for answer in peer.answers.values())
