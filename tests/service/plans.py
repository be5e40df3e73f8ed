"""Small plans and workflows the service tests submit, and their results run in-process
on a simulator of their own (what a job's result must equal)."""

from __future__ import annotations

import asyncio
from typing import Any

import pandas as pd

import kalypso
from kalypso import workflow as wf
from kalypso.engine.sim import SimEngine
from kalypso.query import Table

register = kalypso.register_function


@register("tests.service.word_count")
def word_count(row: dict[str, Any]) -> int:
    return len(str(row["text"]).split())


def reviews(rows: int, offset: int = 0) -> list[dict[str, Any]]:
    moods = ("great", "awful", "fine", "broken", "lovely")
    return [
        {"id": offset + i, "text": f"review {offset + i}: the blender is {moods[i % 5]}"}
        for i in range(rows)
    ]


def review_plan(rows: int, offset: int = 0) -> Table:
    """A filter, a map and a Python step over ``rows`` reviews."""
    return (
        kalypso.table(reviews(rows, offset), name="reviews")
        .sem_filter("Is the review {text} positive?")
        .sem_map("Summarize {text} in five words.", "summary", max_tokens=24)
        .map(word_count, "words")
    )


def debate_workflow() -> wf.Workflow:
    question = wf.input("question")
    first = wf.llm(wf.chat(wf.user("Answer briefly: ", question)), max_tokens=16, name="first")
    second = wf.llm(
        wf.chat(wf.user("Question: ", question, "\nA first answer: ", first, "\nImprove it.")),
        max_tokens=16,
        name="second",
    )
    return wf.Workflow({"answer": second}, name="debate")


def questions(count: int) -> list[str]:
    return [f"Why is the sky blue on day {i}?" for i in range(count)]


def solo_table(plan: Table) -> pd.DataFrame:
    """The plan's result run alone on a fresh simulator."""

    async def run() -> pd.DataFrame:
        engine = SimEngine("smollm2-cpu")
        try:
            return (await plan.arun(engine)).frame
        finally:
            await engine.close()

    return asyncio.run(run())


def solo_workflow(flow: wf.Workflow, inputs: dict[str, list[str]]) -> pd.DataFrame:
    async def run() -> pd.DataFrame:
        engine = SimEngine("smollm2-cpu")
        try:
            return (await wf.arun(flow, engine, inputs)).outputs
        finally:
            await engine.close()

    return asyncio.run(run())


def same_rows(got: pd.DataFrame, expected: pd.DataFrame) -> bool:
    """Equal tables, up to the dtypes a Parquet round trip may change."""
    return bool(
        list(got.columns) == list(expected.columns)
        and got.astype(str)
        .reset_index(drop=True)
        .equals(expected.astype(str).reset_index(drop=True))
    )
