"""``kalypso submit|status|result|cancel``: the client's commands, on :class:`Client`.

The server and token come from ``--url``/``--token`` or ``KALYPSO_URL``/``KALYPSO_TOKEN``
(default URL ``http://127.0.0.1:8080``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from kalypso.client import Client, ServiceError
from kalypso.jobspec import JobSpec

DEFAULT_URL = "http://127.0.0.1:8080"


def add_job_commands(sub: Any, handler: Callable[[argparse.Namespace], int]) -> None:
    """Add ``submit``, ``status``, ``result`` and ``cancel`` to the CLI's subcommands."""

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--url", default=os.environ.get("KALYPSO_URL", DEFAULT_URL))
        parser.add_argument("--token", default=None, help="API token (default: $KALYPSO_TOKEN)")
        parser.set_defaults(func=handler)

    submit = sub.add_parser("submit", help="submit a job spec (JSON) to a server")
    submit.add_argument("spec", type=Path, help="the job spec, a JSON file")
    submit.add_argument("--wait", action="store_true", help="follow its progress until final")
    common(submit)
    submit.set_defaults(job_command="submit")
    status = sub.add_parser("status", help="a job's state and progress")
    status.add_argument("job_id")
    common(status)
    status.set_defaults(job_command="status")
    result = sub.add_parser("result", help="download a job's result table")
    result.add_argument("job_id")
    result.add_argument(
        "-o", "--output", type=Path, required=True, help="a .parquet, .json or .csv file"
    )
    common(result)
    result.set_defaults(job_command="result")
    cancel = sub.add_parser("cancel", help="cancel a job")
    cancel.add_argument("job_id")
    common(cancel)
    cancel.set_defaults(job_command="cancel")


def _summary(job: dict[str, Any]) -> str:
    progress = job.get("progress") or {}
    calls = progress.get("calls")
    tail = f", {calls} calls, hit rate {progress.get('hit_rate', 0):.0%}" if calls else ""
    return f"{job['id']} {job['status']}{tail}"


def run(args: argparse.Namespace, console: Console) -> int:
    token = args.token or os.environ.get("KALYPSO_TOKEN")
    if not token:
        console.print("[red]error:[/red] give --token or set KALYPSO_TOKEN")
        return 2
    try:
        with Client(args.url, token) as client:
            return _run(args, client, console)
    except ServiceError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


def _run(args: argparse.Namespace, client: Client, console: Console) -> int:
    command = args.job_command
    if command == "submit":
        try:
            spec = JobSpec.model_validate(json.loads(args.spec.read_text()))
        except (OSError, json.JSONDecodeError, ValidationError) as exc:
            console.print(f"[red]error:[/red] {args.spec}: {exc}")
            return 2
        job = client.submit(spec)
        print(job["id"])
        if args.wait:
            for event in client.events(job["id"]):
                if event.type == "status":
                    console.print(f"{job['id']}: {event.data.get('status')}")
            job = client.status(job["id"])
            console.print(_summary(job))
            return 0 if job["status"] == "completed" else 1
        return 0
    if command == "status":
        print(json.dumps(client.status(args.job_id), indent=2))
        return 0
    if command == "cancel":
        console.print(_summary(client.cancel(args.job_id)))
        return 0
    suffix = args.output.suffix.lower()
    if suffix not in (".parquet", ".json", ".csv"):
        console.print("[red]error:[/red] -o must end in .parquet, .json or .csv")
        return 2
    if suffix == ".parquet":
        args.output.write_bytes(client.result_bytes(args.job_id, "parquet"))
    elif suffix == ".json":
        args.output.write_bytes(client.result_bytes(args.job_id, "json"))
    else:
        client.result(args.job_id).to_csv(args.output, index=False)
    console.print(f"wrote {args.output}")
    return 0
