"""The weight names of the Llama-shaped decoder (RMSNorm, GQA attention, SwiGLU MLP) that Llama-3 and Qwen3
share: megatron-core's local-spec names against Hugging Face's, for a spec's ``layer_rows`` and
``global_rows``. Qwen3's QK-norm rows are here too; they apply only to a shape with ``qk_layernorm``.
"""

from __future__ import annotations

from midtrain.train.families.spec import Row

LAYER_ROWS: tuple[Row, ...] = (
    ("input_layernorm.weight", ("input_layernorm.weight",), "copy"),
    (
        "self_attention.linear_qkv.weight",
        ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
        "qkv",
    ),
    ("self_attention.q_layernorm.weight", ("self_attn.q_norm.weight",), "copy"),  # Qwen3 QK-norm
    ("self_attention.k_layernorm.weight", ("self_attn.k_norm.weight",), "copy"),
    ("self_attention.linear_proj.weight", ("self_attn.o_proj.weight",), "copy"),
    ("pre_mlp_layernorm.weight", ("post_attention_layernorm.weight",), "copy"),
    ("mlp.linear_fc1.weight", ("mlp.gate_proj.weight", "mlp.up_proj.weight"), "fc1"),
    ("mlp.linear_fc2.weight", ("mlp.down_proj.weight",), "copy"),
)
GLOBAL_ROWS: tuple[tuple[str, str], ...] = (
    ("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
    ("decoder.final_layernorm.weight", "model.norm.weight"),
    ("output_layer.weight", "lm_head.weight"),  # untied models only
)
