"""RoPE settings, one table for three places: ``ModelConfig``, megatron-core and Hugging Face.

Context extension changes how positions become rotations (a new base, YaRN, or Llama-3-style frequency
scaling). The trained weights only make sense with the same rotations at inference, so the recipe fields
(``model.rotary_base``, ``model.rope_scaling*``) are translated here in both directions:

- to megatron-core: ``GPTModel`` keyword arguments plus the ``yarn_*`` attributes its YaRN embedding reads
  from the ``TransformerConfig`` (megatron-core 0.16 keeps them off the dataclass);
- to/from a Hugging Face ``config.json``: ``rope_parameters`` (transformers >= 5) and the legacy top-level
  ``rope_theta`` / ``rope_scaling`` keys older engines (vLLM, SGLang, llama.cpp converters) still read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from midtrain.config import ConfigError

if TYPE_CHECKING:
    from midtrain.train.model_config import ModelConfig

# -- megatron-core --------------------------------------------------------------------------------------


def gpt_model_kwargs(m: ModelConfig) -> dict[str, Any]:
    """Keyword arguments for ``megatron.core.models.gpt.GPTModel`` that set the positions."""
    kwargs: dict[str, Any] = {
        "position_embedding_type": "yarn" if m.rope_scaling == "yarn" else "rope",
        "rotary_base": m.rotary_base,
    }
    if m.rope_scaling == "llama3":
        kwargs.update(rope_scaling=True, rope_scaling_factor=m.rope_scaling_factor)
    return kwargs


def transformer_config_attrs(m: ModelConfig) -> dict[str, Any]:
    """Attributes to set on the ``TransformerConfig`` before building the model (YaRN reads them by name).

    The defaults of mscale=1 / mscale_all_dim=0 / rounded correction range are exactly Hugging Face's
    default YaRN (attention_factor = 0.1 ln(factor) + 1, truncate=True), so the two compute the same cos/sin.
    """
    if m.rope_scaling != "yarn":
        return {}
    return {
        "yarn_rotary_scaling_factor": m.rope_scaling_factor,
        "yarn_original_max_position_embeddings": m.rope_original_max_position_embeddings,
        "yarn_beta_fast": m.yarn_beta_fast,
        "yarn_beta_slow": m.yarn_beta_slow,
        "yarn_mscale": 1.0,
        "yarn_mscale_all_dim": 0.0,
        "yarn_correction_range_round_to_int": True,
    }


# -- Hugging Face ---------------------------------------------------------------------------------------


def to_hf_rope_parameters(m: ModelConfig) -> dict[str, Any]:
    """``rope_parameters`` for a transformers-5 config."""
    params: dict[str, Any] = {
        "rope_type": "default" if m.rope_scaling == "none" else m.rope_scaling,
        "rope_theta": float(m.rotary_base),
    }
    if m.rope_scaling == "llama3":
        params.update(
            factor=m.rope_scaling_factor,
            low_freq_factor=m.rope_low_freq_factor,
            high_freq_factor=m.rope_high_freq_factor,
            original_max_position_embeddings=m.rope_original_max_position_embeddings,
        )
    elif m.rope_scaling == "yarn":
        params.update(
            factor=m.rope_scaling_factor,
            beta_fast=m.yarn_beta_fast,
            beta_slow=m.yarn_beta_slow,
            original_max_position_embeddings=m.rope_original_max_position_embeddings,
        )
    return params


def legacy_hf_rope_keys(m: ModelConfig) -> dict[str, Any]:
    """Top-level ``rope_theta`` and ``rope_scaling`` as transformers-4 configs (and most engines) read them."""
    params = to_hf_rope_parameters(m)
    scaling = None
    if m.rope_scaling != "none":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        scaling["type"] = scaling["rope_type"]  # the pre-4.45 key, still read by some converters
    return {"rope_theta": params["rope_theta"], "rope_scaling": scaling}


_UNSUPPORTED_YARN_KEYS = ("attention_factor", "mscale", "mscale_all_dim")


def from_hf_rope_parameters(params: dict[str, Any] | None, where: str = "config.json") -> dict[str, Any]:
    """ModelConfig field values from a transformers ``rope_parameters`` dict; refuses what megatron lacks."""
    params = dict(params or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    if "rope_theta" not in params:
        raise ConfigError(f"{where}: rope_parameters has no rope_theta")
    out: dict[str, Any] = {"rotary_base": float(params["rope_theta"])}
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError(f"{where}: partial_rotary_factor={params['partial_rotary_factor']} is not supported")
    if rope_type == "default":
        out["rope_scaling"] = "none"
    elif rope_type == "llama3":
        out.update(
            rope_scaling="llama3",
            rope_scaling_factor=float(params["factor"]),
            rope_low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            rope_high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            rope_original_max_position_embeddings=int(params["original_max_position_embeddings"]),
        )
    elif rope_type == "yarn":
        extra = [k for k in _UNSUPPORTED_YARN_KEYS if params.get(k) is not None]
        if extra or params.get("truncate", True) is not True:
            raise ConfigError(
                f"{where}: YaRN with {extra or ['truncate=false']} is not supported "
                "(megatron-core's YaRN matches HF's default attention factor only)"
            )
        out.update(
            rope_scaling="yarn",
            rope_scaling_factor=float(params["factor"]),
            rope_original_max_position_embeddings=int(params["original_max_position_embeddings"]),
            yarn_beta_fast=float(params.get("beta_fast") or 32.0),
            yarn_beta_slow=float(params.get("beta_slow") or 1.0),
        )
    else:
        raise ConfigError(f"{where}: rope_type {rope_type!r} is not supported (default, llama3, yarn are)")
    return out
