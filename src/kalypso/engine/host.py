"""What machine this is, for benchmark records and for the key of a cached engine
calibration: step costs measured on one host do not carry to another (this project's CPU
hosts have differed by 4x in vLLM's step time between an AVX-512 and an AVX2-only
processor)."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")


def cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` of a ``/proc/cpuinfo`` text ("" when absent)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return ""


@functools.cache
def describe_host() -> str:
    """``"<cpu model>, <n> cores, <vector ISA torch's CPU kernels use>"``, for example
    ``"AMD EPYC, 2 cores, AVX2"``; a part that cannot be read is left out."""
    parts = []
    try:
        parts.append(cpu_model(CPUINFO.read_text()))
    except OSError:
        logger.debug("no %s: the CPU model is left out", CPUINFO)
    parts.append(f"{os.cpu_count() or '?'} cores")
    try:
        import torch

        parts.append(torch.backends.cpu.get_cpu_capability())
    except ImportError:
        logger.debug("torch is not installed: the vector ISA is left out")
    return ", ".join(p for p in parts if p)
