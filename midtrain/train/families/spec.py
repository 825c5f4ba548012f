"""What a model family is to midtrain: one ``ModelFamily`` per family, registered in ``__init__.py``.

A spec holds every fact that differs between families, so code elsewhere looks the family up and reads
it instead of branching on its name: the Hugging Face names (``model_type`` and the transformers class in
config.json), the weight-name tables between megatron-core and Hugging Face, what an imported config.json
implies that it does not say (QK-norm), the config.json keys an export fixes, the mixture-of-experts
variant if the family has one, the chat markup, and whether midtrain's offline default tokenizer is the
family's. Pure data and small functions: ``model_config.py`` validates ``model.family`` against the
registry without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from midtrain.formats.chat_format import CHATML, ChatFormat

# (megatron-core name suffix, the Hugging Face suffixes it is made of, how they combine: copy | qkv | fc1)
Row = tuple[str, tuple[str, ...], str]


@dataclass(frozen=True)
class HFArch:
    model_type: str  # config.json "model_type"
    architecture: str  # config.json "architectures": the transformers class that loads it


@dataclass(frozen=True)
class MoeLayout:
    """A family's mixture-of-experts variant: its own Hugging Face names, expert rows and config keys."""

    name: str  # as messages name it ("Qwen3-MoE")
    hf: HFArch
    rows: Callable[[int], list[Row]]  # the MLP rows of one layer with n experts (router, then the experts)
    fields_from_hf: Callable[[dict[str, Any], str], dict[str, Any]]  # (config.json, where) -> ModelConfig fields
    hf_fields: Callable[[Any], dict[str, Any]]  # ModelConfig -> the config.json keys of the MoE layer
    score_function: str = "softmax"  # the only router scoring the Hugging Face class computes
    shared_expert: bool = False  # whether the Hugging Face class has an always-on shared expert


@dataclass(frozen=True)
class ModelFamily:
    name: str  # model.family
    hf: HFArch  # the dense model's Hugging Face names
    layer_rows: tuple[Row, ...]  # per decoder layer (QK-norm rows apply when the shape has qk_layernorm)
    global_rows: tuple[tuple[str, str], ...]  # embedding, final norm, output layer (left out when tied)
    qk_layernorm: bool  # what an imported config.json implies (transformers' class decides, not a key)
    hf_fixed: Mapping[str, Any] = field(default_factory=dict)  # config.json keys an export writes as given
    moe: MoeLayout | None = None  # None: the family has no mixture-of-experts layout
    chat: ChatFormat = CHATML  # the turn markers its chat tokenizers use (generation stops at turn_end)
    default_tokenizer: bool = False  # midtrain.formats.tokenizer's offline default is this family's

    def hf_archs(self) -> list[tuple[HFArch, bool]]:
        """(Hugging Face names, is the MoE variant) for each layout the family has."""
        return [(self.hf, False)] + ([(self.moe.hf, True)] if self.moe else [])
