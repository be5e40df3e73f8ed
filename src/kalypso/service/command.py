"""``kalypso serve`` and ``kalypso tokens``: the server's own commands (run on its machine).

kalypso serve [engine flags] [--db URL] [--host H] [--port P] [--import MODULE ...]
kalypso tokens create NAME [--db URL] [--max-running-jobs N]
kalypso tokens revoke NAME [--db URL]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
from pathlib import Path

from platformdirs import user_data_dir
from rich.console import Console

from kalypso.engine.open import (
    add_engine_arguments,
    close_engines,
    engine_spec,
    open_engines,
    parse_size_bytes,
    replica_count,
    replica_urls,
)
from kalypso.service.app import DEFAULT_MAX_REQUEST_BYTES, ServiceSettings, create_app
from kalypso.service.database import Database, database_url_for
from kalypso.service.tokens import TokenError, create_token, revoke_token

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8080


def default_database_url() -> str:
    """An SQLite file in the user's data directory (created if missing)."""
    folder = Path(user_data_dir("kalypso"))
    folder.mkdir(parents=True, exist_ok=True)
    return database_url_for(folder / "service.db")


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help="SQLAlchemy URL of the jobs database (default: an SQLite file in the user's data"
        " directory; postgresql+psycopg://... for PostgreSQL)",
    )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser, replicas=True)
    add_db_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--max-request-bytes",
        type=parse_size_bytes,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help="largest job spec accepted, inline tables included (default %(default)s bytes)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a Python module to import first; its kalypso.register_function calls name the"
        " Python steps that jobs may use (repeatable)",
    )


def add_token_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("create", "revoke"))
    parser.add_argument("name", help="the token's name (its owner)")
    parser.add_argument(
        "--max-running-jobs", type=int, default=4, help="unfinished jobs allowed at once"
    )
    add_db_argument(parser)


async def serve(args: argparse.Namespace, console: Console) -> int:
    """Run the server until Ctrl-C or SIGTERM; unfinished jobs resume on the next start."""
    import uvicorn

    for module in args.imports:
        importlib.import_module(module)
    count = replica_count(args)  # bad flags are refused before anything starts
    database = Database(args.db or default_database_url())
    try:
        engines = await open_engines(engine_spec(args), count, urls=replica_urls(args))
        try:
            app = create_app(database, engines, ServiceSettings(args.max_request_bytes))
            config = uvicorn.Config(
                app, host=args.host, port=args.port, log_level="info", lifespan="on"
            )
            on = engines[0].name if count == 1 else f"{count} replicas of {engines[0].name}"
            console.print(
                f"kalypso serving on http://{args.host}:{args.port} with {on},"
                f" jobs in {database.engine.url.render_as_string(hide_password=True)}"
            )
            await uvicorn.Server(config).serve()
        finally:
            await close_engines(engines)
    finally:
        database.close()
    return 0


def tokens(args: argparse.Namespace, console: Console) -> int:
    database = Database(args.db or default_database_url())
    try:
        with database.session() as session:
            if args.action == "create":
                secret = create_token(session, args.name, max_running_jobs=args.max_running_jobs)
                console.print(f"token {args.name!r} created; it is shown only now:")
                print(secret)
            else:
                revoke_token(session, args.name)
                console.print(f"token {args.name!r} revoked")
    except TokenError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    finally:
        database.close()
    return 0


def run_serve(args: argparse.Namespace, console: Console) -> int:
    return asyncio.run(serve(args, console))
