"""kalypso.pandas on the simulator: bad input refused in Lotus's terms before anything
runs, when a pending frame runs (once), and what a failed, timed-out or interrupted run
leaves (nothing held, the frame still pending)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import kalypso
import kalypso.pandas
from kalypso.core.errors import QueryError
from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine
from kalypso.pandas import LotusArgumentError, runtime
from tests.pandas.programs import ABSTRACTS, COURSES, SKILLS


class CountingSim(SimEngine):
    """The simulator, counting requests; ``fail_after`` requests fail with an engine
    error, ``hang_after`` never answer."""

    def __init__(self, fail_after: int | None = None, hang_after: int | None = None) -> None:
        super().__init__("smollm2-cpu-f32")
        self.requests = 0
        self.fail_after = fail_after
        self.hang_after = hang_after

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests += 1
        if self.fail_after is not None and self.requests > self.fail_after:
            raise EngineError("injected failure")
        if self.hang_after is not None and self.requests > self.hang_after:
            await asyncio.Event().wait()
        return await super().generate(request)


@pytest.fixture
def sim() -> Iterator[CountingSim]:
    engine = CountingSim()
    kalypso.configure(engine=engine, progress=False, result_cache=False)
    try:
        yield engine
    finally:
        kalypso.pandas.close()


BAD_CALLS: list[tuple[str, Any, str]] = [
    ("sem_filter", lambda: COURSES.sem_filter(123), "sem_filter: user_instruction"),
    ("missing column", lambda: COURSES.sem_filter("{Course} is hard"), "names no column"),
    ("brace", lambda: COURSES.sem_filter("{Course Name is hard"), "unmatched"),
    ("strategy", lambda: COURSES.sem_filter("{Course Name} is hard", strategy="cot"), "strategy"),
    ("examples", lambda: COURSES.sem_filter("{Course Name} x", examples=COURSES), "examples"),
    ("cascade", lambda: COURSES.sem_filter("{Course Name} x", cascade_args={}), "cascade_args"),
    ("raw", lambda: COURSES.sem_filter("{Course Name} x", return_raw_outputs=True), "return_raw"),
    ("temperature", lambda: COURSES.sem_map("{Course Name}", temperature=0.7), "temperature"),
    ("model kwarg", lambda: COURSES.sem_map("{Course Name}", top_k=3), "top_k"),
    ("system", lambda: COURSES.sem_map("{Course Name}", system_prompt="Be brief"), "system_prompt"),
    ("map suffix", lambda: COURSES.sem_map("{Course Name}", suffix="Course Name"), "suffix"),
    ("topk K", lambda: COURSES.sem_topk("Best {Course Name}?", K=0), "sem_topk: K"),
    ("topk method", lambda: COURSES.sem_topk("{Course Name}?", K=1, method="bogus"), "method"),
    ("join how", lambda: COURSES.sem_join(SKILLS, "{Course Name} {Skill}", how="left"), "how"),
    ("join side", lambda: COURSES.sem_join(SKILLS, "{Skill:left} x", how="inner"), "left side"),
    ("join other", lambda: COURSES.sem_join([1, 2], "{Course Name} {Skill}"), "other"),
    ("extract in", lambda: COURSES.sem_extract(["nope"], {"a": None}), "input_cols"),
    ("extract out", lambda: COURSES.sem_extract(["Course Name"], ["a"]), "output_cols"),
    ("agg group", lambda: ABSTRACTS.sem_agg("{abstract}", group_by=["nope"]), "group_by"),
    ("sim join K", lambda: COURSES.sem_sim_join(SKILLS, "Course Name", "Skill", K=-1), "K"),
    ("sim join on", lambda: COURSES.sem_sim_join(SKILLS, "x", "Skill", K=1), "left_on"),
    ("search K", lambda: ABSTRACTS.sem_search("abstract", "bees"), "K or n_rerank"),
    ("search col", lambda: ABSTRACTS.sem_search("nope", "bees", K=1), "col_name"),
    ("cluster", lambda: ABSTRACTS.sem_cluster_by("abstract", 2), "sem_cluster_by"),
    ("column names", lambda: pd.DataFrame({0: ["a"]}).sem_filter("{0} x"), "strings"),
]


@pytest.mark.parametrize(
    "call,match", [(c, m) for _, c, m in BAD_CALLS], ids=[n for n, _, _ in BAD_CALLS]
)
def test_bad_input_is_refused_naming_the_lotus_argument_and_nothing_runs(
    sim: CountingSim, call: Any, match: str
) -> None:
    with pytest.raises(LotusArgumentError, match=match) as caught:
        call()
    assert isinstance(caught.value, ValueError)  # as Lotus's own errors
    assert sim.requests == 0


def test_bad_configuration_is_refused_and_keeps_the_current_session(sim: CountingSim) -> None:
    before = kalypso.pandas.current()
    for kwargs in ({"engine": 42}, {"policy": "fastest"}, {"max_tokens": 0}, {"engine": "ftp://x"}):
        with pytest.raises(kalypso.PlanError, match="configure"):
            kalypso.configure(**kwargs)
    assert kalypso.pandas.current() is before


def test_building_opens_no_engine_and_runs_nothing() -> None:
    kalypso.pandas.close()
    frame = COURSES.sem_filter("{Course Name} is hard").sem_map("Why is {Course Name} hard?")
    assert frame.pending and runtime._current is None
    assert "sem_filter" in frame.explain() and "sem_map" in frame.explain()


def test_a_pending_frame_runs_once_on_its_first_read(sim: CountingSim) -> None:
    frame = COURSES.sem_map("Name a book about {Course Name}.", max_tokens=4)
    assert isinstance(frame, pd.DataFrame) and frame.pending and sim.requests == 0
    shown = repr(frame)
    runs = sim.requests
    assert runs >= len(COURSES) and "_map" in shown
    assert len(frame) == len(COURSES) and frame.shape == (len(COURSES), 2)
    head = frame.head(2)
    assert type(head) is pd.DataFrame
    assert pd.concat([frame, frame]).shape == (2 * len(COURSES), 2)
    assert sim.requests == runs  # read many times, run once
    assert type(frame.collect()) is pd.DataFrame


def test_a_semantic_call_on_a_run_frame_starts_a_new_plan(sim: CountingSim) -> None:
    frame = COURSES.sem_map("Name a book about {Course Name}.", max_tokens=4)
    len(frame)
    runs = sim.requests
    chained = frame.sem_filter("{_map} is a real book")
    assert chained.pending and [op.kind for op in chained.chain.table.operators] == ["sem_filter"]
    len(chained)
    assert sim.requests == runs + len(COURSES)


def test_an_engine_failure_fails_the_read_holds_nothing_and_the_frame_stays_pending() -> None:
    engine = CountingSim(fail_after=2)
    kalypso.configure(engine=engine, progress=False, result_cache=False)
    try:
        frame = COURSES.sem_map("Name a book about {Course Name}.", max_tokens=4)
        with pytest.raises(QueryError, match="injected failure"):
            len(frame)
        assert frame.pending
        stats = kalypso.pandas.current().call(engine.stats())
        assert stats.running_requests == 0 and stats.waiting_requests == 0
        engine.fail_after = None
        assert len(frame) == len(COURSES)  # read again, it runs again
    finally:
        kalypso.pandas.close()


def test_a_hanging_call_times_out_and_holds_nothing() -> None:
    engine = CountingSim(hang_after=1)
    kalypso.configure(engine=engine, progress=False, result_cache=False, call_timeout_s=0.5)
    try:
        frame = COURSES.sem_map("Name a book about {Course Name}.", max_tokens=4)
        with pytest.raises(QueryError, match=r"(?i)timed out|timeout"):
            len(frame)
        assert frame.pending
    finally:
        kalypso.pandas.close()


def test_ctrl_c_while_a_frame_runs_cancels_the_run_and_the_session_still_works() -> None:
    engine = CountingSim(hang_after=1)
    kalypso.configure(engine=engine, progress=False, result_cache=False)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        pending = COURSES.sem_map("Name a book about {Course Name}.", max_tokens=4)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            len(pending)
        assert pending.pending
        engine.hang_after = None
        assert len(COURSES.sem_filter("{Course Name} is hard", return_all=True)) == len(COURSES)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        kalypso.pandas.close()
