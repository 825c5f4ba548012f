"""Read a Hugging Face model directory: its ModelConfig, its weights, and load them into a GPTModel.

``load_hf_into(model, path)`` is the hook the trainer calls for ``init_from: <HF dir>``: it maps the HF
tensors through midtrain/train/hf_mapping.py and copies into this rank's parameters, cutting the
tensor-parallel shard itself (megatron marks each parameter with ``tensor_model_parallel`` and
``partition_dim``) and taking only this pipeline stage's layers. Works on CPU and GPU, any TP/PP.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from midtrain.config import ConfigError
from midtrain.train import checkpoint as ckpt
from midtrain.train import distributed, hf_mapping
from midtrain.train.config import TrainConfig
from midtrain.train.hf_gguf import gguf_to_hf_dir, is_gguf_source
from midtrain.train.model_config import ModelConfig

if TYPE_CHECKING:
    from megatron.core.models.gpt import GPTModel

log = logging.getLogger(__name__)

_LOCAL_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_LOCAL_EXPERT = re.compile(r"^mlp\.experts\.local_experts\.(\d+)\.(.+)$")
_GROUPED_EXPERT = re.compile(r"^mlp\.experts\.(linear_fc[12])\.weight(\d+)$")  # TE grouped-GEMM experts


def is_hf_model_dir(path: str | Path) -> bool:
    """A directory with a config.json and weights (safetensors or PyTorch .bin)."""
    p = Path(path)
    return (p / "config.json").is_file() and (any(p.glob("*.safetensors")) or any(p.glob("pytorch_model*.bin")))


def read_hf_config(path: str | Path) -> dict[str, Any]:
    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        raise ConfigError(f"{path}: not a Hugging Face model directory (no config.json)")
    return json.loads(cfg_file.read_text())


def model_config_from_hf(path: str | Path) -> ModelConfig:
    """The ModelConfig for the model in ``path`` (family, shape, RoPE), validated."""
    fields = hf_mapping.model_fields_from_hf(read_hf_config(path), where=f"{path}/config.json")
    m = ModelConfig(**fields)
    m.validate()
    return m


class LazySafetensors(Mapping):
    """name -> tensor over safetensors files, each tensor read when asked for (nothing is held twice)."""

    def __init__(self, files: list[Path]) -> None:
        from safetensors import safe_open

        self._where: dict[str, Any] = {}
        for f in files:
            handle = safe_open(str(f), framework="pt")
            self._where.update(dict.fromkeys(handle.keys(), handle))

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._where[key].get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def load_hf_state_dict(path: str | Path) -> Mapping[str, torch.Tensor]:
    """All tensors of an HF model directory (sharded or single safetensors, read lazily; or PyTorch .bin)."""
    p = Path(path)
    files = sorted(p.glob("*.safetensors"))
    if files:
        return LazySafetensors(files)
    bins = sorted(p.glob("pytorch_model*.bin"))
    if not bins:
        raise ConfigError(f"{path}: no *.safetensors or pytorch_model*.bin weights")
    out: dict[str, torch.Tensor] = {}
    for f in bins:
        out.update(torch.load(f, map_location="cpu", weights_only=True))
    return out


def _check_shape_matches(model: torch.nn.Module, m: Any, path: str | Path) -> None:
    tc = getattr(model, "config", None)
    if tc is None:
        return
    pairs = {
        "num_layers": tc.num_layers,
        "hidden_size": tc.hidden_size,
        "ffn_hidden_size": tc.ffn_hidden_size,
        "num_attention_heads": tc.num_attention_heads,
        "num_query_groups": tc.num_query_groups,
        "kv_channels": tc.kv_channels,
        "qk_layernorm": tc.qk_layernorm,
        "num_experts": tc.num_moe_experts,
        "moe_ffn_hidden_size": tc.moe_ffn_hidden_size if tc.num_moe_experts else None,
    }
    for name, built in pairs.items():
        want = getattr(m, name)
        if want != built:
            raise ConfigError(
                f"init_from: {path} has model.{name}={want} but the model was built with {built}; "
                "take the model section from the checkpoint (midtrain convert hf2mcore writes it)"
            )


def _tp_shard(name: str, full: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a full tensor for ``param``."""
    if not getattr(param, "tensor_model_parallel", False):
        return full
    from megatron.core import parallel_state

    if ".mlp.experts." in name:  # routed experts are split over the expert-tensor-parallel ranks
        tp, rank = (
            parallel_state.get_expert_tensor_parallel_world_size(),
            parallel_state.get_expert_tensor_parallel_rank(),
        )
    else:
        tp, rank = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_tensor_model_parallel_rank(),
        )
    if tp == 1:
        return full
    if name.endswith("linear_fc1.weight"):  # SwiGLU [gate; up]: each rank holds [gate_r; up_r]
        gate, up = full.chunk(2, 0)
        return torch.cat([gate.chunk(tp, 0)[rank], up.chunk(tp, 0)[rank]], 0)
    return full.chunk(tp, dim=param.partition_dim)[rank]  # type: ignore[attr-defined]  # set by megatron


def local_to_global_names(model: GPTModel) -> dict[str, str]:
    """This rank's state-dict names -> whole-model names: pipeline stages number their layers from 0 and
    expert-parallel ranks their experts from 0."""
    layers = model.decoder.layers
    expert_offset = 0
    num_experts = getattr(model.config, "num_moe_experts", None)
    if num_experts:
        from megatron.core import parallel_state

        ep = parallel_state.get_expert_model_parallel_world_size()
        expert_offset = parallel_state.get_expert_model_parallel_rank() * (num_experts // ep)
    out = {}
    for name in model.state_dict():
        mt = _LOCAL_LAYER.match(name)
        if mt:
            global_idx = layers[int(mt.group(1))].layer_number - 1
            out[name] = f"decoder.layers.{global_idx}.{global_expert_name(mt.group(2), expert_offset)}"
        else:
            out[name] = name
    return out


def global_expert_name(layer_param: str, expert_offset: int) -> str:
    """A layer parameter's name with this rank's expert numbered globally, in the local spec's form.

    Sequential experts are ``mlp.experts.local_experts.E.linear_fc1.weight``; Transformer Engine's grouped
    GEMM experts hold the same tensors as ``mlp.experts.linear_fc1.weightE``. Other names pass through."""
    me = _LOCAL_EXPERT.match(layer_param)
    if me:
        return f"mlp.experts.local_experts.{int(me.group(1)) + expert_offset}.{me.group(2)}"
    mg = _GROUPED_EXPERT.match(layer_param)
    if mg:
        return f"mlp.experts.local_experts.{int(mg.group(2)) + expert_offset}.{mg.group(1)}.weight"
    return layer_param


@torch.no_grad()
def load_full_into(model: GPTModel, full: Mapping[str, torch.Tensor], tied: bool, progress: str | None = None) -> int:
    """Copy whole-model tensors (local-spec names; may be a lazy McoreView) into this rank's parameters:
    only the tensors of this pipeline stage are read, each cut to this rank's TP shard. Returns the count.
    With ``progress`` (a label such as "hf2mcore"), logs each layer as it is done."""
    params = dict(model.named_parameters())
    names = local_to_global_names(model)
    copied = 0
    n_layers = len(model.decoder.layers)
    layer, t0 = None, time.monotonic()
    for local, global_name in names.items():
        mt = _LOCAL_LAYER.match(local)
        now = int(mt.group(1)) if mt else None
        if progress and layer is not None and now != layer:
            log.info(
                "%s: layer %d/%d done (%d tensors, %.1fs)", progress, layer + 1, n_layers, copied, time.monotonic() - t0
            )
        layer = now
        if local not in params:
            continue  # _extra_state and buffers
        key = hf_mapping.local_spec_name(global_name)  # a TE model names the fused norms differently
        if key == "output_layer.weight" and tied:
            key = "embedding.word_embeddings.weight"  # the last stage's copy of a tied embedding
        if key not in full:
            raise KeyError(f"no source tensor for {local!r} (looked up {key!r})")
        piece = _tp_shard(key, full[key], params[local])
        if piece.shape != params[local].shape:
            raise ValueError(f"{local}: source shard {tuple(piece.shape)} != parameter {tuple(params[local].shape)}")
        params[local].copy_(piece.to(params[local].dtype))
        copied += 1
    return copied


def load_hf_into(model: torch.nn.Module, path: str | Path, model_cfg: Any | None = None) -> None:
    """Load an HF model directory's weights into ``model`` (this rank's TP shard / PP stage).

    ``model_cfg`` is the recipe's ModelConfig; when given it must describe the same shape as the HF
    config.json (checked, with the field named). Weights only: nothing else of the run changes.
    """
    m = model_config_from_hf(path)
    if model_cfg is not None:
        for f in (
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "num_query_groups",
            "vocab_size",
            "tie_embeddings",
            "qk_layernorm",
            "num_experts",
            "moe_ffn_hidden_size",
            "moe_router_topk",
        ):
            if getattr(model_cfg, f) != getattr(m, f):
                raise ConfigError(f"model.{f}: the recipe says {getattr(model_cfg, f)} but {path} has {getattr(m, f)}")
    _check_shape_matches(model, m, path)
    view = hf_mapping.McoreView(load_hf_state_dict(path), hf_mapping.Shape.of(m))
    n = load_full_into(model, view, m.tie_embeddings)
    log.info("init_from %s: loaded %d tensors (Hugging Face %s)", path, n, m.family)


# -- midtrain convert hf2mcore ---------------------------------------------------------------------------

HF_SOURCE = "hf_source"  # DST/hf_source/: the source config.json, generation config and tokenizer files
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def conversion_config(cfg: TrainConfig) -> TrainConfig:
    """The same model as one CPU process builds it for conversion: TP=PP=CP=1, local spec.

    dist_checkpointing stores global tensors, so what one process writes loads at any TP/PP layout.
    """
    return cfg.in_one_process().replace(
        parallel={"distributed_optimizer": False}, precision={"transformer_impl": "local"}
    )


@contextlib.contextmanager
def single_process_world() -> Iterator[None]:
    """A world of one with TP=PP=CP=1 for conversion; torn down afterwards only if it was ours."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        raise RuntimeError("conversion runs in a single process; do not launch it with torchrun/srun")
    owned = not dist.is_initialized()
    distributed.initialize()
    try:
        yield
    finally:
        if owned:
            distributed.destroy()


def empty_model(cfg: Any) -> GPTModel:
    """A GPTModel for ``cfg`` with allocated but uninitialised weights (no random-init cost)."""
    # lazy: loads megatron only when this runs
    from midtrain.train.model import build_gpt_model

    with torch.device("meta"):
        model = build_gpt_model(cfg, on_cpu=True)  # also on a GPU node: conversion is a CPU job
    return model.to_empty(device="cpu")


def hf_dtype_name(hf: dict[str, Any]) -> str:
    name = str(hf.get("dtype") or hf.get("torch_dtype") or "bfloat16")
    return "fp32" if "float32" in name else "bf16"


def convert_hf_to_mcore(
    src: str | Path, dst: str | Path, tensor: int = 1, pipeline: int = 1, dtype: str | None = None
) -> Path:
    """HF model directory -> a midtrain checkpoint directory (what init_from and `sft --from` take).

    DST gets checkpoints/iter_0000000/ (megatron dist_checkpointing, the trainer's layout), config.yaml
    (a TrainConfig whose model section is the HF model's, parallel layout TP/PP as asked) and hf_source/
    (config.json, generation config and tokenizer files, which mcore2hf writes back out).

    ``src`` may also be a GGUF file or a packaged model's name (``smollm2``, midtrain/train/hf_gguf.py):
    transformers dequantises it into DST/hf_source/, which then holds a whole HF model directory (fp32
    weights included: the reference the converted checkpoint is checked against), and conversion goes on
    from there.
    """
    import shutil

    dst = Path(dst)
    if is_gguf_source(src):
        if ckpt.latest_checkpoint(dst) is not None:
            raise FileExistsError(f"{dst} already holds a midtrain checkpoint; choose a new destination")
        src = gguf_to_hf_dir(src, dst / HF_SOURCE)
    src = Path(src)
    hf = read_hf_config(src)
    m = model_config_from_hf(src)
    dtype = dtype or hf_dtype_name(hf)
    cfg = TrainConfig(name=dst.name, run_dir=str(dst), model=m)
    cfg = cfg.replace(
        precision={"dtype": dtype},
        parallel={"tensor": tensor, "pipeline": pipeline},
        data={"seq_length": min(cfg.data.seq_length, m.max_position_embeddings)},
    ).validate()
    if ckpt.latest_checkpoint(dst) is not None:
        raise FileExistsError(f"{dst} already holds a midtrain checkpoint; choose a new destination")

    # config + source files first: the checkpoint's completion marker, written last, marks the whole DST
    keep = dst / HF_SOURCE
    keep.mkdir(parents=True, exist_ok=True)
    cfg.save_yaml(dst / "config.yaml")
    if keep.resolve() != src.resolve():  # a GGUF source was written there already
        shutil.copy2(src / "config.json", keep / "config.json")
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, keep / name)
    with single_process_world():
        log.info("hf2mcore: building the %d-layer model and reading %s", m.num_layers, src)
        model = empty_model(conversion_config(cfg))
        view = hf_mapping.McoreView(load_hf_state_dict(src), hf_mapping.Shape.of(m))
        n = load_full_into(model, view, m.tie_embeddings, progress="hf2mcore")
        log.info("hf2mcore: %d tensors converted; writing the checkpoint to %s", n, dst)
        path = ckpt.save_checkpoint(
            dst, 0, model, None, {"step": 0, "converted_from": str(src.resolve()), "format": "hf2mcore"}, keep_last=1
        )
    log.info("hf2mcore: %s -> %s (%d tensors, %s, for TP=%d PP=%d)", src, path, n, dtype, tensor, pipeline)
    return path
