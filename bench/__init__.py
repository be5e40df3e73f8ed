"""Kalypso's benchmark tree (not part of the installed package).

* ``python -m bench ...`` (:mod:`bench.cli`): workloads side by side under several
  policies, on real vLLM (CPU) or the simulator; records in ``bench/results/``.
* :mod:`bench.workloads`: the plans of the paper's workloads; :mod:`bench.datasets`: their
  deterministic data generators (and the generator of the demo's bundled reviews).
* :mod:`bench.runner`, :mod:`bench.report`, :mod:`bench.plots`: records, markdown tables,
  figures.
* :mod:`bench.overhead` (scheduler CPU per task), :mod:`bench.optimality` (schedule quality
  against the MILP optimum).
* ``lotus_runner.py``, ``pz_runner.py``, ``server_counters.py``: run scripts for Lotus and
  Palimpzest, each in its own venv.

Run from the repository's root (``python -m bench``), with Kalypso's venv.
"""
