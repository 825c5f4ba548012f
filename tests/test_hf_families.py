"""Every registered model family converts: its spec's names and tables match the model transformers builds.

The parity tests (test_hf_convert.py, test_hf_moe.py) compare logits for the families they know; this one runs
over the registry, so a family added by copying a spec is checked the moment it is registered: the config.json
its spec writes loads in transformers as the class the spec names, every weight of that model maps through the
spec's tables and back unchanged, and reading the config.json back gives the same model.
"""

from __future__ import annotations

import re

import pytest
import torch

from midtrain.config import ConfigError
from midtrain.train import families, hf_mapping
from midtrain.train.config import TrainConfig
from midtrain.train.hf_import import load_hf_state_dict
from midtrain.train.model_config import ModelConfig

LAYOUTS = [(spec, moe) for spec in families.FAMILIES.values() for _, moe in spec.hf_archs()]


def _tiny(spec: families.ModelFamily, moe: bool) -> ModelConfig:
    experts = dict(num_experts=4, moe_ffn_hidden_size=32, moe_router_topk=2) if moe else {}
    return ModelConfig(
        family=spec.name,
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=96,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=16,
        vocab_size=256,
        qk_layernorm=spec.qk_layernorm,
        tie_embeddings=False,
        **experts,  # type: ignore[arg-type]
    ).validate()


@pytest.mark.parametrize("spec,moe", LAYOUTS, ids=[f"{s.name}{'-moe' if moe else ''}" for s, moe in LAYOUTS])
def test_each_registered_family_round_trips_through_transformers(spec, moe, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    m = _tiny(spec, moe)
    written = hf_mapping.hf_config_dict(m, dtype="float32")
    arch = spec.moe.hf if moe else spec.hf
    assert (written["model_type"], written["architectures"]) == (arch.model_type, [arch.architecture])
    hf_cfg = AutoConfig.for_model(**written)
    assert ModelConfig(**hf_mapping.model_fields_from_hf(hf_cfg.to_dict())).validate() == m

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32)
    assert type(model).__name__ == arch.architecture
    model.save_pretrained(tmp_path)  # the released layout (transformers may hold experts fused in memory)
    hf = dict(load_hf_state_dict(tmp_path).items())
    shape = hf_mapping.Shape.of(m)
    mc = hf_mapping.hf_to_mcore(hf, shape)  # raises on a weight the tables miss or a tensor they do not map
    back = hf_mapping.mcore_to_hf(mc, shape)
    assert sorted(back) == sorted(hf)
    assert all(torch.equal(back[k], hf[k]) for k in hf)


def test_an_unknown_architecture_is_refused_naming_the_registered_ones():
    with pytest.raises(ConfigError) as refused:
        hf_mapping.model_fields_from_hf({"model_type": "gemma2", "num_attention_heads": 4}, where="gemma/config.json")
    message = str(refused.value)
    assert message.startswith("gemma/config.json: model_type 'gemma2' is not supported")
    supported = re.search(r"supported: ([^;)]+)", message)
    registered = re.search(r"registered families: ([^)]+)", message)
    assert supported and registered, message
    every_type = {arch.model_type for spec in families.FAMILIES.values() for arch, _ in spec.hf_archs()}
    assert set(supported.group(1).split(", ")) == every_type
    assert registered.group(1).split(", ") == list(families.FAMILIES)


def test_an_unknown_family_name_is_refused_naming_the_registered_ones():
    with pytest.raises(ConfigError) as refused:
        TrainConfig(model=ModelConfig(family="gemma2")).validate()
    assert str(refused.value) == (
        f"model.family: 'gemma2' is not a registered model family (registered: {', '.join(families.FAMILIES)})"
    )


def test_a_family_without_a_moe_layout_refuses_an_moe_export():
    dense_only = [s for s in families.FAMILIES.values() if s.moe is None]
    if not dense_only:
        pytest.skip("every registered family has an MoE layout")
    m = ModelConfig(family=dense_only[0].name, num_experts=4, moe_ffn_hidden_size=32).validate()
    with_moe = [s.name for s in families.FAMILIES.values() if s.moe]
    with pytest.raises(ConfigError, match=f"no Hugging Face MoE layout for '{m.family}'.*{', '.join(with_moe)}"):
        hf_mapping.hf_config_dict(m)
