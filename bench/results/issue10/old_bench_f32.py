"""Run the old code's (2847a9d) ``kalypso bench`` with vLLM in float32.

The old code has no float32 switch, so this patches its settings to float32 and its KV
sizing to 4-byte entries, then hands the arguments to its CLI. Run from a worktree of
that commit::

    PYTHONPATH=<worktree>/src python bench/results/issue10/old_bench_f32.py \\
        --engine http --workload fever --systems operator-at-a-time,adaptive --out F.json
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any


def main() -> int:
    import kalypso.engine.vllm_settings as settings_module
    from kalypso.cli import main as kalypso_main

    per_token = settings_module.kv_bytes_per_token
    original = settings_module.VLLMSettings

    def float32_kv_bytes_per_token(model_path: str, dtype_bytes: int = 2) -> int | None:
        return per_token(model_path, 4)  # type: ignore[arg-type]

    def float32_settings(*args: Any, **kwargs: Any) -> Any:
        settings = original(*args, **kwargs)
        return dataclasses.replace(settings, dtype="float32", max_model_len_tokens=2048)

    setattr(settings_module, "kv_bytes_per_token", float32_kv_bytes_per_token)  # noqa: B010
    setattr(settings_module, "VLLMSettings", float32_settings)  # noqa: B010
    sys.argv = ["kalypso", "bench", *sys.argv[1:]]
    return int(kalypso_main() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
