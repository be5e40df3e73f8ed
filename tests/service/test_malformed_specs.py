"""Malformed job specs answer 422 with the error shape, naming the field at fault, and
create no job."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from .conftest import LiveServer
from .plans import debate_workflow, review_plan

Spec = dict[str, Any]


def table_job() -> Spec:
    return {"plan": review_plan(2).to_spec().model_dump(mode="json")}


def workflow_job() -> Spec:
    return {
        "plan": debate_workflow().to_spec().model_dump(mode="json"),
        "inputs": {"question": ["why?"]},
    }


def change(base: Callable[[], Spec], edit: Callable[[Spec], None]) -> Spec:
    spec = copy.deepcopy(base())
    edit(spec)
    return spec


def op(spec: Spec, index: int) -> dict[str, Any]:
    operator: dict[str, Any] = spec["plan"]["operators"][index]
    return operator


def node(spec: Spec, index: int) -> dict[str, Any]:
    found: dict[str, Any] = spec["plan"]["nodes"][index]
    return found


CASES: list[tuple[str, Callable[[], Spec], str]] = [
    ("no plan", lambda: {}, "plan"),
    ("plan of no kind", lambda: change(table_job, lambda s: s["plan"].pop("kind")), "plan"),
    (
        "plan of an unknown kind",
        lambda: change(table_job, lambda s: s["plan"].update(kind="sql")),
        "plan",
    ),
    (
        "unknown top-level field",
        lambda: change(table_job, lambda s: s.update(priority=1)),
        "priority",
    ),
    (
        "version 2",
        lambda: change(table_job, lambda s: s["plan"].update(version=2)),
        "plan.table.version",
    ),
    (
        "name not text",
        lambda: change(table_job, lambda s: s["plan"].update(name=5)),
        "plan.table.name",
    ),
    (
        "no source",
        lambda: change(table_job, lambda s: s["plan"].pop("source")),
        "plan.table.source",
    ),
    (
        "rows and parquet",
        lambda: change(table_job, lambda s: s["plan"]["source"].update(parquet_b64="UEFS")),
        "plan.table.source",
    ),
    (
        "rows not a list",
        lambda: change(table_job, lambda s: s["plan"]["source"].update(rows="x")),
        "plan.table.source.rows",
    ),
    (
        "a row value a list",
        lambda: change(table_job, lambda s: s["plan"]["source"]["rows"][0].update(text=[1])),
        "plan.table.source.rows.0.text",
    ),
    (
        "bad base64",
        lambda: change(table_job, lambda s: s["plan"].update(source={"parquet_b64": "!!"})),
        "plan.table.source",
    ),
    (
        "operators not a list",
        lambda: change(table_job, lambda s: s["plan"].update(operators={})),
        "plan.table.operators",
    ),
    (
        "unknown operator",
        lambda: change(table_job, lambda s: op(s, 0).update(op="sem_guess")),
        "plan.table.operators.0",
    ),
    (
        "operator without op",
        lambda: change(table_job, lambda s: op(s, 0).pop("op")),
        "plan.table.operators.0",
    ),
    (
        "filter without instruction",
        lambda: change(table_job, lambda s: op(s, 0).pop("instruction")),
        "plan.table.operators.0.sem_filter.instruction",
    ),
    (
        "unknown operator field",
        lambda: change(table_job, lambda s: op(s, 0).update(temperature=1)),
        "plan.table.operators.0.sem_filter.temperature",
    ),
    (
        "max_tokens zero",
        lambda: change(table_job, lambda s: op(s, 1).update(max_tokens=0)),
        "plan.table.operators.1.sem_map.max_tokens",
    ),
    (
        "max_tokens as text",
        lambda: change(table_job, lambda s: op(s, 1).update(max_tokens="24")),
        "plan.table.operators.1.sem_map.max_tokens",
    ),
    (
        "function given as code",
        lambda: change(table_job, lambda s: op(s, 2).update(function="lambda r: 1")),
        "plan.table.operators.2.map.function",
    ),
    (
        "unregistered function",
        lambda: change(table_job, lambda s: op(s, 2).update(function="os.system")),
        "plan",
    ),
    (
        "unknown column",
        lambda: change(table_job, lambda s: op(s, 0).update(instruction="Is {mood} ok?")),
        "plan",
    ),
    (
        "inputs for a table",
        lambda: change(table_job, lambda s: s.update(inputs={"q": ["a"]})),
        "inputs",
    ),
    (
        "unknown policy",
        lambda: change(table_job, lambda s: s.update(options={"policy": "fastest"})),
        "options",
    ),
    (
        "unknown option",
        lambda: change(table_job, lambda s: s.update(options={"kv_overcommit": 2})),
        "options.kv_overcommit",
    ),
    (
        "negative timeout",
        lambda: change(table_job, lambda s: s.update(options={"call_timeout_s": -1})),
        "options.call_timeout_s",
    ),
    (
        "window too long",
        lambda: change(table_job, lambda s: s.update(completion_window_s=1e9)),
        "completion_window_s",
    ),
    (
        "metadata value too long",
        lambda: change(table_job, lambda s: s.update(metadata={"k": "v" * 600})),
        "metadata.k",
    ),
    ("workflow without inputs", lambda: change(workflow_job, lambda s: s.pop("inputs")), "inputs"),
    (
        "inputs not texts",
        lambda: change(workflow_job, lambda s: s.update(inputs={"question": [1]})),
        "inputs.question.0",
    ),
    (
        "unknown node type",
        lambda: change(workflow_job, lambda s: node(s, 1).update(type="agent")),
        "plan.workflow.nodes.1",
    ),
    (
        "dangling reference",
        lambda: change(
            workflow_job, lambda s: node(s, 1)["messages"][0]["parts"].append({"ref": "ghost"})
        ),
        "plan.workflow.nodes.1",
    ),
    (
        "bad role",
        lambda: change(workflow_job, lambda s: node(s, 1)["messages"][0].update(role="boss")),
        "plan.workflow.nodes.1.llm.messages.0.role",
    ),
    (
        "output of an unknown node",
        lambda: change(workflow_job, lambda s: s["plan"].update(outputs={"answer": "ghost"})),
        "plan.workflow",
    ),
    (
        "no outputs",
        lambda: change(workflow_job, lambda s: s["plan"].update(outputs={})),
        "plan.workflow.outputs",
    ),
]


@pytest.mark.parametrize(("case", "spec", "field"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_spec_answers_422_naming_the_field(
    live: LiveServer, case: str, spec: Callable[[], Spec], field: str
) -> None:
    token = live.token("mallory")
    headers = {"Authorization": f"Bearer {token}"}
    response = httpx.post(live.url + "/v1/jobs", json=spec(), headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(field), error
    assert httpx.get(live.url + "/v1/jobs", headers=headers).json()["data"] == []


def test_the_cases_are_many_and_distinct() -> None:
    assert len(CASES) >= 25
    assert len({c[0] for c in CASES}) == len(CASES)
