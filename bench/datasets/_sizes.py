"""Size constants shared by the generators and the registry (kept here so the registry
need not import the generator modules at package import time)."""

from __future__ import annotations

from typing import Final

REVIEWS_DEFAULT_N: Final = 60
"""Reviews in the bundled demo file (and the "quick" scale)."""

FEVER_PAPER_PASSAGES: Final = 50_000
"""Corpus size of the FEVER "paper" scale, standing in for the paper's 5,416,568 passages."""
