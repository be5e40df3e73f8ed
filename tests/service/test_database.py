"""The job server's database: migrations match the models, tokens are stored hashed, and
the call journal answers only the call it recorded."""

from __future__ import annotations

import asyncio

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select, text

from kalypso.engine.protocol import GenerateRequest, GenerateResult, RequestTimings
from kalypso.service import Database
from kalypso.service.db import Base, CallRow, JobRow, TokenRow, utcnow
from kalypso.service.journal import DatabaseJournal
from kalypso.service.migrate import upgrade
from kalypso.service.tokens import TokenError, authenticate, create_token, revoke_token


def test_the_migrations_build_exactly_the_models_schema(database: Database) -> None:
    upgrade(database.engine)  # a second time: nothing to do
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection)
        assert compare_metadata(context, Base.metadata) == []
        version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert version == "r0001"


def test_tokens_are_stored_hashed_and_can_be_revoked(database: Database) -> None:
    with database.session() as session:
        secret = create_token(session, "ops", max_running_jobs=2)
        with pytest.raises(TokenError):
            create_token(session, "ops")
        with pytest.raises(TokenError):
            create_token(session, "bad name!")
        stored = session.scalars(select(TokenRow)).one()
        assert secret not in (stored.secret_sha256, stored.name, stored.id)
        caller = authenticate(session, secret)
        assert caller is not None and caller.name == "ops" and caller.max_running_jobs == 2
        assert authenticate(session, secret + "x") is None
        revoke_token(session, "ops")
        assert authenticate(session, secret) is None


def request(max_tokens: int, prompt: tuple[int, ...] = (1, 2, 3)) -> GenerateRequest:
    return GenerateRequest(request_id="r", prompt_token_ids=prompt, max_tokens=max_tokens)


def result(tokens: tuple[int, ...], finish: str) -> GenerateResult:
    return GenerateResult("r", tokens, "text", finish, 3, 0, RequestTimings(0.1, 0.1, 0.2))  # type: ignore[arg-type]


def add_job(database: Database) -> None:
    """A token ``t`` and its job ``j``, in progress."""
    with database.session() as session:
        session.add(
            TokenRow(
                id="t", name="t", secret_sha256="x" * 64, created_at=utcnow(), max_running_jobs=1
            )
        )
        session.flush()
        session.add(
            JobRow(
                id="j",
                token_id="t",
                kind="table",
                spec={},
                status="in_progress",
                created_at=utcnow(),
                cancel_requested=False,
                requests_total=1,
                runs=1,
                progress={},
                errors=[],
                result_partial=False,
                metadata_={},
            )
        )
        session.commit()


def test_the_journal_answers_only_the_same_call(database: Database) -> None:
    add_job(database)

    async def scenario() -> None:
        journal = DatabaseJournal(database, "j")
        site = ("1/map", (0,))
        await journal.record(site, request(8), result((5, 6), "stop"))
        await journal.record(("1/map", (1,)), request(8), result((7,) * 8, "length"))
        again = DatabaseJournal(database, "j")
        assert await again.load() == 2
        found = await again.lookup(site, request(8))
        assert found is not None and found.output_token_ids == (5, 6)
        assert found.cached_tokens == found.prompt_tokens  # nothing computed now
        assert await again.lookup(site, request(16)) is not None  # ended by itself within 16
        assert await again.lookup(site, request(1)) is None  # would have been cut at 1
        assert await again.lookup(("1/map", (1,)), request(16)) is None  # cut at its cap
        assert await again.lookup(site, request(8, prompt=(1, 2, 4))) is None
        assert await again.lookup(("2/map", (0,)), request(8)) is None
        assert again.counts.replayed_calls == 2
        assert await again.compact() == 2

    asyncio.run(scenario())
    with database.session() as session:
        assert session.scalars(select(CallRow)).all() == []


def test_many_journaled_calls_share_few_commits(database: Database) -> None:
    add_job(database)

    async def burst() -> None:
        journal = DatabaseJournal(database, "j")
        await asyncio.gather(
            *(journal.record(("n", (i,)), request(4), result((1,), "stop")) for i in range(200))
        )

    asyncio.run(burst())
    assert database.group_commits < 20
    with database.session() as session:
        assert len(session.scalars(select(CallRow)).all()) == 200
