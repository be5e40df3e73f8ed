"""Kalypso's benchmark tree (not part of the installed package).

* ``python -m bench ...`` (:mod:`bench.cli`): workloads side by side under several
  policies, on real vLLM (CPU) or the simulator; records in ``bench/results/``.
* :mod:`bench.workloads`: the plans of the paper's workloads; :mod:`bench.datasets`: their
  deterministic data generators (and the generator of the demo's bundled reviews).
* :mod:`bench.runner`, :mod:`bench.report`, :mod:`bench.plots`: records, markdown tables,
  figures.
* :mod:`bench.overhead` (scheduler CPU per task), :mod:`bench.optimality` (schedule quality
  against the MILP optimum).
* ``external/``: ``lotus_runner.py`` and ``pz_runner.py`` (with ``server_counters.py``) run
  a workload with Lotus and Palimpzest, each in its own venv (a folder of its own, so that
  ``bench/datasets`` never shadows the ``datasets`` package those libraries import).

Run from the repository's root (``python -m bench``), with Kalypso's venv.
"""
