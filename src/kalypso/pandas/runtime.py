"""The engine every DataFrame method runs on: the session :func:`configure` sets up.

A session drives its engine from a private event loop on a daemon thread, so the
DataFrame methods are plain synchronous calls, in a script and inside Jupyter (whose own
loop is already running) alike. One session exists at a time; :func:`configure` replaces
it (closing the engine the old one opened), :func:`close` ends it, and it is closed when
the interpreter exits.

The session closes the engine it drives when it ends, an engine object it was given too
(that engine's tasks run on the session's loop, which ends with it).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from kalypso.core.errors import PlanError
from kalypso.core.policies.base import PolicyError, get_policy
from kalypso.core.prompt import ChatLayout
from kalypso.core.result_cache import PromptResultCache
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import Engine
from kalypso.engine.vllm_settings import VLLMSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

EngineChoice = Engine | EngineSpec | VLLMSettings | str | None
"""What :func:`configure` takes as ``engine``: an engine object (the session drives and
closes it), an
:class:`~kalypso.engine.open.EngineSpec` or :class:`~kalypso.engine.vllm_settings.VLLMSettings`
(opened by the session), a vLLM server's URL (``"http://host:8000"``, with or
without ``/v1``), ``"sim"`` or ``"sim:<profile>"`` for the simulator, ``"vllm"`` for the
bundled model on in-process vLLM, or None (the same)."""

DEFAULT_MAX_TOKENS = 256
"""The cap of a free-form answer (``sem_map``, ``sem_extract``, ``sem_agg``) unless
:func:`configure` is given one: what Lotus's ``LM(max_tokens=...)`` sets."""


@dataclass(frozen=True)
class SessionOptions:
    """How the session runs each plan.

    Attributes:
        policy: the scheduling policy (None: the relational default, ``adaptive``).
        max_tokens: the cap of every free-form answer.
        progress: show the live per-stage view on stderr while a plan runs.
        result_cache: answer a greedy call whose exact prompt an earlier plan of the
            session already sent from that answer (a frame derived twice from one pending
            chain does not pay for the shared operators twice).
        system_prompt: the system message of every call (None: Kalypso's default).
        call_timeout_s: a call not answered in this many seconds fails the run (None:
            the engine's own limit).
    """

    policy: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    progress: bool = False
    result_cache: bool = True
    system_prompt: str | None = None
    call_timeout_s: float | None = None


def _spec_of(choice: EngineChoice) -> EngineSpec:
    """The engine spec a non-object choice names (see :data:`EngineChoice`)."""
    if choice is None or choice == "vllm":
        return EngineSpec(kind="vllm")
    if isinstance(choice, EngineSpec):
        return choice
    if isinstance(choice, VLLMSettings):
        return EngineSpec(kind="vllm", settings=choice)
    if isinstance(choice, str):
        if choice == "sim":
            return EngineSpec(kind="sim")
        if choice.startswith("sim:"):
            return EngineSpec(kind="sim", sim_profile=choice.removeprefix("sim:"))
        if choice.startswith(("http://", "https://")):
            return EngineSpec(kind="http", url=choice)
    raise PlanError(
        "configure: engine must be an engine object, an EngineSpec, VLLMSettings, a vLLM"
        f" server URL (http://...), 'vllm', 'sim' or 'sim:<profile>'; got {choice!r}"
    )


def check_options(options: SessionOptions) -> SessionOptions:
    """``options`` if valid, else :class:`PlanError` naming the argument."""
    if options.policy is not None:
        try:
            get_policy(options.policy)
        except PolicyError as exc:
            raise PlanError(f"configure: policy: {exc}") from None
    if (
        isinstance(options.max_tokens, bool)
        or not isinstance(options.max_tokens, int)
        or options.max_tokens < 1
    ):
        raise PlanError(f"configure: max_tokens must be a positive int, got {options.max_tokens!r}")
    if options.system_prompt is not None and (
        not isinstance(options.system_prompt, str) or not options.system_prompt.strip()
    ):
        raise PlanError(
            f"configure: system_prompt must be a non-empty string, got {options.system_prompt!r}"
        )
    return options


class Session:
    """One engine, its loop thread, and what plans on it share (a chat layout, a result
    cache)."""

    def __init__(self, choice: EngineChoice, options: SessionOptions) -> None:
        self.options = check_options(options)
        spec = None if isinstance(choice, Engine) else _spec_of(choice)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kalypso-pandas", daemon=True
        )
        self._thread.start()
        try:
            self.engine: Engine = (
                choice if spec is None else self.call(open_engine(spec))  # type: ignore[assignment]
            )
        except BaseException:
            self._stop_loop()
            raise
        self.layout = ChatLayout(self.engine.tokenizer)
        self.result_cache = (
            PromptResultCache(self.engine.name) if self.options.result_cache else None
        )
        self._closed = False
        logger.info("kalypso.pandas session on %s", self.engine.name)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the session's loop and wait for it. Interrupted (Ctrl-C),
        the coroutine is cancelled and waited for, so nothing it held outlives it."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            with contextlib.suppress(concurrent.futures.CancelledError, Exception):
                future.result()  # waits for the run to release what it held
            raise

    def close(self) -> None:
        """Close the engine and stop the loop; closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.call(self.engine.close())
        finally:
            self._stop_loop()
        logger.info("kalypso.pandas session on %s closed", self.engine.name)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


_lock = threading.Lock()
_current: Session | None = None


def configure(
    engine: EngineChoice = None,
    *,
    policy: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    progress: bool | None = None,
    result_cache: bool = True,
    system_prompt: str | None = None,
    call_timeout_s: float | None = None,
) -> None:
    """Choose the engine (and how plans run) for every DataFrame method of
    :mod:`kalypso.pandas`; the one line that replaces ``lotus.settings.configure(lm=...)``.

    Args:
        engine: see :data:`EngineChoice`; None is the bundled model on in-process vLLM
            (a script that starts it needs an ``if __name__ == "__main__":`` guard, as
            vLLM starts its engine in a spawned process).
        policy: a scheduling policy name (default ``adaptive``).
        max_tokens: the cap of every free-form answer, as Lotus's ``LM(max_tokens=...)``.
        progress: the live per-stage view on stderr (default: when stderr is a terminal).
        result_cache: reuse greedy answers to identical prompts across the session's
            plans.
        system_prompt: the system message of every call (default: Kalypso's).
        call_timeout_s: fail a run whose call is not answered in this many seconds.

    Raises:
        PlanError: a bad argument (nothing is opened).
        kalypso.engine.protocol.EngineError: the engine could not be started or reached.
    """
    global _current
    shown = sys.stderr.isatty() if progress is None else bool(progress)
    options = SessionOptions(policy, max_tokens, shown, result_cache, system_prompt, call_timeout_s)
    check_options(options)
    if not isinstance(engine, Engine):
        _spec_of(engine)  # refuse a bad choice before closing the current session
    with _lock:
        previous, _current = _current, None
        if previous is not None:
            previous.close()
        _current = Session(engine, options)


def current() -> Session:
    """The session :func:`configure` set up, or one on the bundled model (in-process vLLM)
    opened now when there is none (``KALYPSO_PANDAS_ENGINE`` may name another choice, e.g.
    a server URL)."""
    global _current
    with _lock:
        if _current is None:
            choice = os.environ.get("KALYPSO_PANDAS_ENGINE") or None
            _current = Session(choice, SessionOptions(progress=sys.stderr.isatty()))
        return _current


def current_options() -> SessionOptions:
    """The options plans are built with: the current session's, or the defaults when none
    is open yet (building a plan opens no engine)."""
    with _lock:
        return _current.options if _current is not None else SessionOptions()


def close() -> None:
    """End the current session (closing what it opened); the next semantic call opens a
    new one."""
    global _current
    with _lock:
        previous, _current = _current, None
    if previous is not None:
        previous.close()


atexit.register(close)
