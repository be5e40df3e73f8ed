"""Python steps by name: the registry that lets a plan or workflow travel as data.

A serialized plan (a job spec sent to ``kalypso serve``) never carries code. Its Python
steps (``Table.map``/``filter``, ``wf.fn``, ``wf.cond``'s predicate) name functions that
both sides registered under the same name::

    @kalypso.register_function("word_count")
    def word_count(row): ...

The registry is per process. Names are dotted identifiers; a name is bound to one
function (registering the same function again under its name is allowed, another function
is refused).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from kalypso.core.errors import PlanError

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MAX_NAME_CHARS = 200
_BY_NAME: dict[str, Callable[..., Any]] = {}


def check_function_name(name: object) -> str:
    """``name`` if it is a dotted identifier of at most 200 characters, else PlanError."""
    if not isinstance(name, str) or len(name) > _MAX_NAME_CHARS or not _NAME.match(name):
        raise PlanError(
            f"a function name is a dotted identifier (letters, digits, _ and .) of at most"
            f" {_MAX_NAME_CHARS} characters, got {name!r}"
        )
    return name


def register_function(name: str, function: F | None = None) -> Any:
    """Register ``function`` under ``name`` and return it; without ``function``, a
    decorator that does so.

    Raises:
        PlanError: a bad name, a non-callable, or a name already bound to another function.
    """
    check_function_name(name)

    def add(fn: F) -> F:
        if not callable(fn):
            raise PlanError(f"register_function({name!r}): {fn!r} is not callable")
        known = _BY_NAME.get(name)
        if known is not None and known is not fn:
            raise PlanError(f"a function is already registered as {name!r}")
        _BY_NAME[name] = fn
        logger.debug("registered function %s", name)
        return fn

    return add if function is None else add(function)


def unregister_function(name: str) -> None:
    """Forget ``name`` (no error when it is not registered)."""
    _BY_NAME.pop(name, None)


def lookup_function(name: str) -> Callable[..., Any]:
    """The function registered as ``name``.

    Raises:
        PlanError: nothing is registered under that name (the message lists what is).
    """
    check_function_name(name)
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(sorted(_BY_NAME)) or "none"
        raise PlanError(
            f"no function is registered as {name!r} (registered: {known}); register it"
            " with kalypso.register_function on this side"
        ) from None


def function_name(function: Callable[..., Any]) -> str | None:
    """The name ``function`` is registered under, or None."""
    for name, known in _BY_NAME.items():
        if known is function:
            return name
    return None


def registered_functions() -> tuple[str, ...]:
    """Every registered name, sorted."""
    return tuple(sorted(_BY_NAME))
