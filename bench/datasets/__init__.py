"""Bundled datasets, generated deterministically in code (no downloads).

Five datasets shaped like the workloads of the Kalypso paper (FEVER, MEDEC, BioDEX,
ContractNLI; Table 2 and section 7.2) plus the product-review demo of the README:

>>> from bench import datasets
>>> sorted(datasets.list_datasets())
['biodex', 'contractnli', 'fever', 'medec', 'reviews']
>>> tables = datasets.load("contractnli")
>>> sorted(tables)
['contracts', 'hypotheses']
>>> len(tables["hypotheses"])
17

``load(name, scale, seed)`` returns a dict of table name -> DataFrame; the same arguments
always return identical tables. Each dataset also has a module with a ``generate``
function whose parameters control sizes, lengths and selectivities: :mod:`.reviews`,
:mod:`.fever`, :mod:`.clinical_notes` (medec), :mod:`.biodex`, :mod:`.contracts`
(contractnli). See :mod:`._registry` for the "quick" and "paper" sizes and what was taken
from the paper.
"""

from __future__ import annotations

import pandas as pd

from bench.datasets._registry import REGISTRY, SCALES, DatasetInfo, Scale, resolve

__all__ = ["SCALES", "DatasetInfo", "Scale", "info", "list_datasets", "load"]


def list_datasets() -> dict[str, str]:
    """Registry names mapped to one-line descriptions (aliases are not listed)."""
    return {name: entry.description for name, entry in REGISTRY.items()}


def info(name: str) -> DatasetInfo:
    """The registry entry of ``name`` (tables, generator arguments per scale).

    Raises:
        KeyError: unknown name.
    """
    return resolve(name)


def load(name: str, scale: Scale = "quick", seed: int = 0) -> dict[str, pd.DataFrame]:
    """The tables of dataset ``name`` at ``scale``, generated with ``seed``.

    Args:
        name: one of :func:`list_datasets` (or an alias: ``contracts``,
            ``clinical_notes``/``notes``, ``articles``, ``claims``).
        scale: ``"quick"`` (minutes on 2 CPU cores with a 135M model) or ``"paper"``
            (the sizes of the paper's Table 2).
        seed: generator seed. ``load("reviews")`` (quick, seed 0) reads the bundled
            ``data/reviews.jsonl`` files, identical to what the generator makes.

    Returns:
        Table name -> DataFrame, in the order of ``info(name).tables``.

    Raises:
        KeyError: unknown name.
        ValueError: unknown scale.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    entry = resolve(name)
    params = entry.quick if scale == "quick" else entry.paper
    return entry.make(seed, **params)
