"""A DataFrame whose rows are a pending Kalypso plan: chained semantic calls build one
plan, and the first read of the frame's data runs it, once.

:class:`LazyFrame` is a real :class:`pandas.DataFrame` (``isinstance`` holds, every
pandas function takes it). Its data is pandas' block manager, which every pandas
operation reads first; a lazy frame computes it on that first read:

* a semantic method of :mod:`kalypso.pandas` (``sem_filter``, ``sem_map``, ...) on a
  pending frame adds its operator to the plan and returns a new pending frame; nothing
  runs;
* anything else that reads the frame runs the plan (``repr``, ``len``, indexing, a column,
  ``.columns``, ``.shape``, ``head()``, ``to_*``, ``pd.concat``, iteration...), and so
  does :meth:`LazyFrame.collect`, which returns the plain DataFrame;
* the run happens once; afterwards the frame is an ordinary DataFrame, and
  :attr:`LazyFrame.result` holds the run's statistics.

Frames derived by pandas (``lf.head()``, ``lf[lf.x > 1]``) are plain DataFrames.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
from pandas.core.generic import NDFrame

from kalypso.core.ledger import KVLedger
from kalypso.pandas.runtime import Session, current
from kalypso.query.plan import QueryResult, Table

logger = logging.getLogger(__name__)

ROW_COLUMN = "__kalypso_row__"
"""The hidden column that carries each input row's position through a plan, so that the
output keeps the input's index labels as Lotus's frames do (it never enters a prompt: only
the columns an instruction names do)."""

Finish = Callable[[pd.DataFrame], pd.DataFrame]
"""A step applied to a plan's output frame once its columns carry Lotus's names (added
columns, reordered columns, a dropped score); it keeps :data:`ROW_COLUMN`."""


@dataclass(frozen=True)
class Chain:
    """A pending plan and how its output becomes the frame Lotus would return.

    Attributes:
        table: the Kalypso plan (its source carries :data:`ROW_COLUMN`).
        index: the index of the frame the chain started from.
        finish: steps applied, in order, to the plan's output once its columns carry
            Lotus's names.
        names: ``(plan name, Lotus's name)`` of each plan column whose name differs (a
            joined column that clashed), the later pair winning.
        reset_index: the output is numbered from 0 (after a join, ``sem_topk`` or
            ``sem_agg``) instead of labelled by the input rows it came from.
    """

    table: Table
    index: pd.Index
    finish: tuple[Finish, ...] = ()
    names: tuple[tuple[str, str], ...] = ()
    reset_index: bool = False

    @classmethod
    def over(cls, frame: pd.DataFrame) -> Chain:
        """A chain with no operator yet, over ``frame``."""
        from kalypso.pandas.errors import check_frame

        check_frame(frame)
        source = frame.reset_index(drop=True)
        source[ROW_COLUMN] = range(len(source))
        return cls(Table(source, name="df"), frame.index)

    def then(
        self,
        table: Table,
        finish: Finish | None = None,
        names: dict[str, str] | None = None,
        *,
        reset_index: bool = False,
    ) -> Chain:
        """This chain with ``table`` as its plan, one more finishing step, more names,
        and numbered from 0 if ``reset_index`` (or already so)."""
        return replace(
            self,
            table=table,
            finish=self.finish + ((finish,) if finish is not None else ()),
            names=self.names + tuple((names or {}).items()),
            reset_index=self.reset_index or reset_index,
        )

    def renames(self) -> dict[str, str]:
        """Plan name -> Lotus's name, for the columns whose names differ."""
        return dict(self.names)

    def column_map(self) -> dict[str, str]:
        """Lotus's name -> the plan's name, for every visible output column."""
        renames = self.renames()
        return {renames.get(c, c): c for c in self.table.columns if c != ROW_COLUMN}

    async def arun(
        self, session: Session, ledger: KVLedger | None = None
    ) -> tuple[pd.DataFrame, QueryResult]:
        """Run the plan on the session's engine (on its loop); the frame Lotus would
        return, and the run's result."""
        options = session.options
        given = {"system_prompt": options.system_prompt, "call_timeout_s": options.call_timeout_s}
        extra: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
        result = await self.table.arun(
            session.engine,
            policy=options.policy,
            progress=options.progress,
            layout=session.layout,
            result_cache=session.result_cache,
            ledger=ledger,
            **extra,
        )
        frame = result.frame.rename(columns=self.renames())
        for step in self.finish:
            frame = step(frame)
        if self.reset_index or ROW_COLUMN not in frame.columns:
            frame = frame.drop(columns=[ROW_COLUMN], errors="ignore").reset_index(drop=True)
        else:
            labels = self.index.take(frame[ROW_COLUMN].to_numpy(dtype="int64"))
            frame = frame.drop(columns=[ROW_COLUMN]).set_axis(labels, axis=0)
        return frame, result

    def run(self, session: Session) -> tuple[pd.DataFrame, QueryResult]:
        """:meth:`arun`, waited for."""
        return session.call(self.arun(session))


def run_together(chains: list[Chain], session: Session) -> list[tuple[pd.DataFrame, QueryResult]]:
    """Run several chains at once on the session's engine, sharing one KV ledger (one
    plan per group of a ``group_by``)."""

    async def everything() -> list[tuple[pd.DataFrame, QueryResult]]:
        ledger = KVLedger(session.engine.capacity.num_blocks)
        return list(await asyncio.gather(*(c.arun(session, ledger) for c in chains)))

    return session.call(everything())


class LazyFrame(pd.DataFrame):
    """A DataFrame whose data is computed by a pending plan on the first read (see the
    module docstring)."""

    _metadata: list[str] = []  # noqa: RUF012 - pandas' hook: nothing passes to derived frames

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    def __init__(self, chain: Chain) -> None:
        NDFrame.__init__(self, pd.DataFrame()._mgr)  # type: ignore[call-arg]
        object.__setattr__(self, "_kalypso_chain", chain)
        object.__setattr__(self, "_kalypso_result", None)

    @property
    def _mgr(self) -> Any:
        chain: Chain | None = self.__dict__.get("_kalypso_chain")
        if chain is not None:
            self._materialize(chain)
        return self.__dict__["_kalypso_mgr"]

    @_mgr.setter
    def _mgr(self, manager: Any) -> None:
        self.__dict__["_kalypso_mgr"] = manager

    def _materialize(self, chain: Chain) -> None:
        logger.info(
            "materializing %d operators over %d rows", len(chain.table.operators), len(chain.index)
        )
        frame, result = chain.run(current())
        self.__dict__["_kalypso_mgr"] = frame._mgr
        self.__dict__["_kalypso_chain"] = None
        self.__dict__["_kalypso_result"] = result

    @property
    def pending(self) -> bool:
        """True until the plan has run."""
        return self.__dict__.get("_kalypso_chain") is not None

    @property
    def chain(self) -> Chain | None:
        """The pending plan (None once it has run)."""
        return self.__dict__.get("_kalypso_chain")

    @property
    def result(self) -> QueryResult | None:
        """The run's statistics (calls, prompt, cached and computed tokens per operator,
        ``report()``), once the plan has run; None before, or for a frame that never
        needed a run."""
        return self.__dict__.get("_kalypso_result")

    def collect(self) -> pd.DataFrame:
        """Run the plan if it is pending; the result as a plain DataFrame."""
        return pd.DataFrame(self)

    def __repr__(self) -> str:
        return repr(self.collect())

    def _repr_html_(self) -> str | None:
        html: str | None = self.collect()._repr_html_()  # type: ignore[operator]
        return html

    def explain(self) -> str:
        """The pending plan's pipelines, stages and operators (nothing runs), or a note
        that it has run."""
        chain = self.chain
        if chain is None:
            return "the plan has run; see .result.report()"
        return chain.table.explain()
