"""The service's commands: ``kalypso tokens``, ``submit``, ``status``, ``result`` and
``cancel`` against a running server."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kalypso.cli import main

from .conftest import LiveServer
from .plans import review_plan, same_rows, solo_table


def test_tokens_submit_status_result(
    live: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tokens", "create", "cli-user", "--db", live.database.url]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert token.startswith("kal_")
    assert main(["tokens", "create", "cli-user", "--db", live.database.url]) == 2
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"plan": review_plan(6).to_spec().model_dump(mode="json")}))
    server = ["--url", live.url, "--token", token]
    assert main(["submit", str(spec), "--wait", *server]) == 0
    job_id = capsys.readouterr().out.strip().splitlines()[0]
    assert main(["status", job_id, *server]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    expected = solo_table(review_plan(6))
    for suffix in (".parquet", ".csv", ".json"):
        out = tmp_path / f"result{suffix}"
        assert main(["result", job_id, "-o", str(out), *server]) == 0
        assert out.stat().st_size > 0
    assert same_rows(pd.read_parquet(tmp_path / "result.parquet"), expected)
    assert main(["result", job_id, "-o", str(tmp_path / "result.txt"), *server]) == 2
    assert main(["cancel", job_id, *server]) == 0
    assert main(["status", "job_nope", *server]) == 2
    assert "404" in capsys.readouterr().err
    assert main(["tokens", "revoke", "cli-user", "--db", live.database.url]) == 0
    assert main(["status", job_id, *server]) == 2
    assert "401" in capsys.readouterr().err


def test_submit_refuses_a_bad_file_before_sending(
    live: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text('{"plan": {"kind": "table"}}')
    token = live.token("cli-bad")
    assert main(["submit", str(spec), "--url", live.url, "--token", token]) == 2
    assert "plan.table" in capsys.readouterr().err
    assert (
        main(["submit", str(tmp_path / "missing.json"), "--url", live.url, "--token", token]) == 2
    )
