"""Lotus's DataFrame methods on Kalypso: change the import and the configuration line.

    import pandas as pd
    import kalypso.pandas                             # was: import lotus (and LM)
    kalypso.configure(engine="http://localhost:8000") # was: lotus.settings.configure(lm=...)

    papers = pd.DataFrame({"abstract": [...]})
    llm_papers = papers.sem_filter("{abstract} is about LLMs").sem_map(
        "Summarize the {abstract} in one sentence", suffix="summary")
    print(llm_papers)                                 # the two operators run here, as one plan

Importing this module registers ``sem_filter``, ``sem_map``, ``sem_extract``,
``sem_join``, ``sem_sim_join``, ``sem_topk``, ``sem_agg``, ``sem_search``, ``sem_index``
and ``load_sem_index`` on every DataFrame, with Lotus 1.2.4's arguments (the guide's
``lotus.md`` lists each one: supported, mapped or refused). A chain of them is one pending
:class:`LazyFrame`, run once, when the frame is first read.
"""

from kalypso.pandas import accessors as _accessors  # registers the DataFrame methods
from kalypso.pandas.errors import LotusArgumentError
from kalypso.pandas.lazy import LazyFrame
from kalypso.pandas.runtime import EngineChoice, Session, close, configure, current

__all__ = [
    "EngineChoice",
    "LazyFrame",
    "LotusArgumentError",
    "Session",
    "close",
    "configure",
    "current",
]

del _accessors
