"""Run the old (2847a9d) `kalypso bench` with vLLM in float32: its settings and KV sizing
patched to 4-byte KV (the old code has no switch for it)."""
import dataclasses
import sys

import kalypso.engine.vllm_settings as vs

_per_token = vs.kv_bytes_per_token
vs.kv_bytes_per_token = lambda model_path, dtype_bytes=2: _per_token(model_path, 4)
_Settings = vs.VLLMSettings


def float32_settings(*args, **kwargs):
    settings = _Settings(*args, **kwargs)
    return dataclasses.replace(settings, dtype="float32", max_model_len_tokens=2048)


vs.VLLMSettings = float32_settings  # type: ignore[assignment]

from kalypso.cli import main  # noqa: E402

sys.argv = ["kalypso", "bench", *sys.argv[1:]]
if __name__ == "__main__":
    sys.exit(main())
