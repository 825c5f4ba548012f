"""Write a midtrain checkpoint out as a Hugging Face model directory (`midtrain convert mcore2hf`).

The checkpoint is loaded into one CPU process at TP=PP=1 (dist_checkpointing reshards whatever layout
it was trained at), mapped through midtrain/train/hf_mapping.py, and saved as safetensors (5 GB shards
with an index, as transformers writes them) with a config.json whose RoPE fields are the recipe's, so
inference engines compute the positions training used. Tokenizer files come from, in order: --tokenizer,
the run's hf_source/ (written by hf2mcore), the HF directory the run started from (init_from, followed
through earlier stages of a progression), and the offline default tokenizer for the family whose spec
claims it (Qwen3's). The family's facts (config.json names and keys, weight tables, chat markup) come from
its spec in midtrain/train/families/.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from midtrain.config import ConfigError
from midtrain.formats.chat_format import CHATML, ChatFormat
from midtrain.formats.rundir import run_dir_of
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.train import checkpoint as ckpt
from midtrain.train import families, hf_mapping
from midtrain.train.config import TrainConfig
from midtrain.train.hf_import import (
    DTYPES,
    HF_SOURCE,
    TOKENIZER_FILES,
    conversion_config,
    empty_model,
    is_hf_model_dir,
    single_process_world,
)

log = logging.getLogger(__name__)

SHARD_BYTES = 5 * 1024**3


def locate_checkpoint(src: str | Path) -> tuple[Path, Path]:
    """(run_dir, checkpoint dir) for a run directory or one of its checkpoints/iter_* directories."""

    src = Path(src)
    if (src / ckpt.MARKER).is_file():
        return run_dir_of(src), ckpt.verify_checkpoint(src)  # sizes and SHA-256s, CheckpointError naming a file
    found = ckpt.latest_checkpoint(src)
    if found is None:
        raise ConfigError(
            f"{src}: no complete midtrain checkpoint (expected {src}/checkpoints/iter_*/ with {ckpt.MARKER})"
        )
    return src, ckpt.verify_checkpoint(found)


def find_hf_source(run_dir: Path, max_hops: int = 8) -> Path | None:
    """The HF directory holding this run's original config.json + tokenizer: hf_source/, or init_from's."""

    for _ in range(max_hops):
        if (run_dir / HF_SOURCE / "config.json").is_file():
            return run_dir / HF_SOURCE
        cfg_file = run_dir / "config.yaml"
        if not cfg_file.is_file():
            return None
        init = TrainConfig.from_yaml(cfg_file).init_from
        if not init:
            return None
        init_path = Path(init)
        if is_hf_model_dir(init_path):
            return init_path
        run_dir = run_dir_of(init_path)  # a checkpoint directory: its run
    return None


def save_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' save_file, leaving the file readable as any other file this process writes: safetensors
    creates it 0600, which other accounts on a shared filesystem (an eval job's, a colleague's) cannot read."""
    from safetensors.torch import save_file as write

    write(tensors, str(path), metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def save_safetensors(tensors: dict[str, torch.Tensor], dst: Path, shard_bytes: int = SHARD_BYTES) -> list[str]:
    """transformers' on-disk layout: model.safetensors, or model-0000i-of-0000n.safetensors + index."""

    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t.contiguous()
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], dst / "model.safetensors")
        return ["model.safetensors"]
    names, weight_map = [], {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        log.info("writing %s (%d tensors)", dst / fname, len(shard))
        save_file(shard, dst / fname)
        names.append(fname)
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (dst / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return names


def copy_tokenizer(dst: Path, tokenizer: str | Path | None, hf_source: Path | None, family: str) -> str:
    """Put tokenizer files into ``dst``; returns where they came from. Without any, a family whose spec claims
    the offline default tokenizer gets it; any other family's export is refused."""
    for src in (Path(tokenizer) if tokenizer else None, hf_source):
        if src is None:
            continue
        if src.is_file() and src.name == "tokenizer.json":
            shutil.copy2(src, dst / "tokenizer.json")
            return str(src)
        copied = [n for n in TOKENIZER_FILES if n != "generation_config.json" and (src / n).is_file()]
        if copied:
            for n in copied:
                shutil.copy2(src / n, dst / n)
            return str(src)
        if src == (Path(tokenizer) if tokenizer else None):
            raise ConfigError(f"--tokenizer {tokenizer}: no tokenizer files there ({', '.join(TOKENIZER_FILES)})")
    if families.family(family).default_tokenizer:
        load_tokenizer(None, shared=True).save_pretrained(str(dst))
        return "the offline default tokenizer (midtrain.formats.tokenizer)"
    raise ConfigError(
        "no tokenizer found for the export: the run has no hf_source/ and its init_from is not a "
        "Hugging Face directory; pass --tokenizer PATH (a HF model dir or tokenizer.json)"
    )


def chat_files(dst: Path, hf_cfg: dict[str, Any], source_gen: Path | None, markup: ChatFormat = CHATML) -> list[int]:
    """Make the export serve as a chat model in the family's chat ``markup``; returns the generation config's
    eos ids.

    An engine stops where generation_config.json's eos_token_id says (vLLM falls back to the tokenizer's
    EOS): with only the text EOS (ChatML's <|endoftext|>) a reply runs on past the turn end (<|im_end|>) into
    invented turns. So: eos [turn end, text EOS] as Qwen3 chat checkpoints ship it (a source generation
    config keeps its other fields), the tokenizer's EOS is the turn end, config.json names it.
    tokenizer_config.json is written as transformers 4.x reads it (PreTrainedTokenizerFast, the chat template
    inline: transformers 5 writes TokenizersBackend and chat_template.jinja only, which 4.x-pinned vLLM
    releases cannot load).
    """
    from tokenizers import Tokenizer

    tc_file = dst / "tokenizer_config.json"
    tc: dict[str, Any] = json.loads(tc_file.read_text()) if tc_file.is_file() else {}
    if tc.get("tokenizer_class") in (None, "TokenizersBackend"):
        tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    template = tc.get("chat_template")
    if not template and (dst / "chat_template.jinja").is_file():
        template = tc["chat_template"] = (dst / "chat_template.jinja").read_text()
    turn_end, text_eos = markup.turn_end, markup.text_eos
    ids: dict[str, int | None] = {turn_end: None, text_eos: None}
    if (dst / "tokenizer.json").is_file():
        tok = Tokenizer.from_file(str(dst / "tokenizer.json"))
        ids = {t: tok.token_to_id(t) for t in ids}
    chat = bool(template) and ids[turn_end] is not None
    if chat:
        tc["eos_token"] = turn_end
        tc.setdefault("pad_token", text_eos)
    tc_file.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")

    gen: dict[str, Any] = json.loads(source_gen.read_text()) if source_gen else {}
    old = gen.get("eos_token_id")
    old_ids = old if isinstance(old, list) else [] if old is None else [old]
    eos = [i for i in ((ids[turn_end] if chat else None), ids[text_eos]) if i is not None]
    eos += [i for i in old_ids if i not in eos]
    if eos:
        gen["eos_token_id"] = eos
        hf_cfg["eos_token_id"] = eos[0]
        if ids[text_eos] is not None:
            gen.setdefault("pad_token_id", ids[text_eos])
            hf_cfg.setdefault("pad_token_id", ids[text_eos])
    if gen:
        (dst / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    elif not chat:
        log.warning(
            "mcore2hf: %s: the tokenizer has no %s/%s tokens; no generation_config.json written",
            dst,
            turn_end,
            text_eos,
        )
    return eos


def mcore_state_dict(run_cfg: Any, ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """Whole-model tensors (TP=PP=1 names) of a midtrain checkpoint, in the run's dtype."""
    from megatron.core import dist_checkpointing

    with single_process_world():
        model = empty_model(conversion_config(run_cfg))
        loaded = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(ckpt_dir))
        model.load_state_dict(loaded["model"])
        return {k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}


def convert_mcore_to_hf(
    src: str | Path,
    dst: str | Path,
    tokenizer: str | Path | None = None,
    dtype: str | None = None,
    overwrite: bool = False,
) -> Path:
    """A midtrain run/checkpoint -> a Hugging Face model directory that transformers loads.

    ``dtype`` (bf16 | fp32) defaults to the run's precision.dtype. ``overwrite`` replaces an earlier
    export in ``dst`` (its weights, config and tokenizer files); otherwise an existing model is an error.
    """

    run_dir, ckpt_dir = locate_checkpoint(src)
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.is_file():
        raise ConfigError(f"{run_dir}: no config.yaml next to the checkpoints (needed for the model shape)")
    cfg = TrainConfig.from_yaml(cfg_file).validate()
    hf_mapping.check_exportable(cfg.model)
    dtype = dtype or cfg.precision.dtype
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    dst = Path(dst)
    if (dst / "config.json").exists():
        if not overwrite:
            raise FileExistsError(
                f"{dst} already holds a Hugging Face model; choose a new destination (or --overwrite)"
            )
        for old in [*dst.glob("model*.safetensors"), dst / "model.safetensors.index.json", dst / "config.json"]:
            old.unlink(missing_ok=True)
    dst.mkdir(parents=True, exist_ok=True)

    shape = hf_mapping.Shape.of(cfg.model)
    log.info("mcore2hf: reading %s (%d layers)", ckpt_dir, shape.num_layers)
    t0 = time.monotonic()
    mc = mcore_state_dict(cfg, ckpt_dir)
    log.info("mcore2hf: checkpoint read in %.1fs; converting", time.monotonic() - t0)
    t0 = time.monotonic()
    hf = hf_mapping.mcore_to_hf(
        mc,
        shape,
        progress=lambda i, n: log.info("mcore2hf: layer %d/%d converted (%.1fs)", i, n, time.monotonic() - t0),
    )
    hf = {k: v.to(DTYPES[dtype]) for k, v in hf.items()}
    files = save_safetensors(hf, dst, SHARD_BYTES)

    source = find_hf_source(run_dir)
    base = json.loads((source / "config.json").read_text()) if source else None
    hf_cfg = hf_mapping.hf_config_dict(cfg.model, base=base, dtype="float32" if dtype == "fp32" else "bfloat16")
    tok_from = copy_tokenizer(dst, tokenizer, source, cfg.model.family)
    source_gen = source / "generation_config.json" if source else None
    markup = families.family(cfg.model.family).chat
    chat_files(dst, hf_cfg, source_gen if source_gen and source_gen.is_file() else None, markup)
    (dst / "config.json").write_text(json.dumps(hf_cfg, indent=2, sort_keys=True) + "\n")
    log.info(
        "mcore2hf: %s -> %s (%d tensors in %d file(s), %s; tokenizer from %s)",
        ckpt_dir,
        dst,
        len(hf),
        len(files),
        dtype,
        tok_from,
    )
    return dst


def export_hf(src: str | Path, dst: str | Path, tokenizer: str | Path | None = None) -> Path:
    """Library entry point (the SFT probe calls it after training): export, replacing an earlier export."""
    return convert_mcore_to_hf(src, dst, tokenizer=tokenizer, overwrite=True)
