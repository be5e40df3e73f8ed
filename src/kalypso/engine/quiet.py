"""Keep vLLM's start-up chatter (its INFO logs, torch's NUMA and Triton warnings, loading
progress bars) out of a command's output: while an engine starts, file descriptors 1 and 2
point at a log file, which the engine-core process inherits for its whole life."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def output_to(path: Path | None) -> Iterator[None]:
    """Send this process's stdout and stderr (and its children's) to ``path`` inside the
        block; ``None`` leaves them alone. vLLM's own logging (in this process too, after the
    block) is lowered to errors."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    sys.stdout.flush()
    sys.stderr.flush()
    logging.getLogger("vllm").setLevel(logging.ERROR)
    saved = (os.dup(1), os.dup(2))
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
