"""API tokens: created on the server's machine (``kalypso tokens create NAME``), shown
once, stored only as a SHA-256 hash. A request carries one as ``Authorization: Bearer``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kalypso.service.db import TokenRow, utcnow

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "kal_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class TokenError(ValueError):
    """A bad token name, a name already taken, or an unknown token."""


@dataclass(frozen=True)
class Caller:
    """Who a request is from: a token's id and name, and its limit of running jobs."""

    token_id: str
    name: str
    max_running_jobs: int


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(session: Session, name: str, *, max_running_jobs: int = 4) -> str:
    """Create a token named ``name`` and return its secret (the only time it is shown).

    Raises:
        TokenError: a bad name, or one already taken.
    """
    if not _NAME.match(name):
        raise TokenError(f"a token name is 1-100 letters, digits, '_', '.' or '-', got {name!r}")
    if max_running_jobs < 1:
        raise TokenError(f"max_running_jobs must be >= 1, got {max_running_jobs}")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = TokenRow(
        id=f"tok_{uuid.uuid4().hex[:16]}",
        name=name,
        secret_sha256=_digest(secret),
        created_at=utcnow(),
        max_running_jobs=max_running_jobs,
    )
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise TokenError(f"a token named {name!r} exists") from None
    logger.info("token %s created (%s)", name, row.id)
    return secret


def revoke_token(session: Session, name: str) -> None:
    """Revoke the token named ``name`` (its requests answer 401 from now on)."""
    row = session.scalar(select(TokenRow).where(TokenRow.name == name))
    if row is None:
        raise TokenError(f"no token is named {name!r}")
    row.revoked_at = utcnow()
    session.commit()


def authenticate(session: Session, secret: str) -> Caller | None:
    """The caller ``secret`` belongs to, or None for an unknown or revoked token."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    digest = _digest(secret)
    row = session.scalar(select(TokenRow).where(TokenRow.secret_sha256 == digest))
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(row.secret_sha256, digest):
        return None
    return Caller(row.id, row.name, row.max_running_jobs)
