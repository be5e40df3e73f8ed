"""The host description every bench record carries, and the report's title that shows it."""

from __future__ import annotations

from bench.report import markdown
from kalypso.engine.host import cpu_model, describe_host

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu avx2

processor\t: 1
model name\t: AMD EPYC
"""


def test_the_cpu_model_is_the_first_model_name_line() -> None:
    assert cpu_model(CPUINFO) == "AMD EPYC"
    assert cpu_model("processor\t: 0\n") == ""


def test_the_host_names_its_cores_and_the_vector_isa_torch_uses() -> None:
    import torch

    host = describe_host()
    assert " cores" in host
    assert host.endswith(torch.backends.cpu.get_cpu_capability())


def test_the_report_names_the_host_of_each_group() -> None:
    base = {"workload": "fever", "kv_cache_tokens": 3040, "table_tokens": 266, "llm_calls": 40,
            "prefill_tokens": 100, "min_prefill_tokens": 100, "lost_prefixes": 0,
            "cells_agree": 1.0}  # fmt: skip
    records = [
        {**base, "system": "operator-at-a-time", "time_s": 24.0, "host": "AMD EPYC, 2 cores, AVX2"},
        {**base, "system": "adaptive", "time_s": 23.0, "host": "AMD EPYC, 2 cores, AVX2"},
    ]
    assert "; on AMD EPYC, 2 cores, AVX2" in markdown(records)
    assert "; on " not in markdown([{**r, "host": ""} for r in records])
