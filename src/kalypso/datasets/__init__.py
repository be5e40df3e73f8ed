"""The demo's bundled data: product reviews read from ``data/*.jsonl``.

:func:`kalypso.datasets.reviews.load_bundled` reads them. The generator that writes them,
and the generators of the benchmark workloads (ContractNLI, MEDEC, BioDEX, FEVER), live in
the benchmark tree (``bench/datasets``), outside the installed package.
"""
