"""The model's shape (ModelConfig), its checks, and the arithmetic on it: head size and parameter counts.

Everything here is pure and imports no stage, so validating a recipe stays cheap (no torch); the estimate,
the FLOP count, the model builder and the HF mappings read the shape from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from midtrain.config import Config, require
from midtrain.train import families

# megatron-core's llama3 scaling (RotaryEmbedding._apply_scaling) takes only `factor` from GPTModel; the
# other three values are fixed to Llama 3.1's. A recipe asking for others would train with different
# rotations than it exports, so it is refused.
MEGATRON_LLAMA3_FIXED = {
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_position_embeddings": 8192,
}


@dataclass(frozen=True)
class ParamCount:
    embedding: int
    per_layer: int
    num_layers: int
    final_norm: int
    output_layer: int  # 0 when tied to the embedding
    matmul_per_layer: int  # the linear weights of one layer (what FLOPs count)
    output_matmul: int  # V × h: the logits matmul costs FLOPs even when its weight is tied
    expert_per_layer: int = 0  # routed-expert weights in per_layer (MoE; split over expert-parallel ranks)
    active_per_layer: int = 0  # per_layer minus the experts a token does not use (= per_layer when dense)

    @property
    def total(self) -> int:
        return self.embedding + self.per_layer * self.num_layers + self.final_norm + self.output_layer

    @property
    def non_embedding(self) -> int:
        return self.per_layer * self.num_layers + self.final_norm

    @property
    def active(self) -> int:
        """Parameters one token uses (MoE: router, top-k experts, shared expert; dense: all)."""
        return self.embedding + self.active_per_layer * self.num_layers + self.final_norm + self.output_layer

    @property
    def flops_params(self) -> int:
        """N in 6·N: parameters used in matmuls (every linear layer and the logits projection)."""
        return self.matmul_per_layer * self.num_layers + self.output_matmul


@dataclass
class ModelConfig(Config):
    """A GPT-family decoder in the Llama-3 / Qwen3 shape; dense, or Qwen3-MoE when num_experts is set."""

    family: str = "qwen3"  # a registered ModelFamily (midtrain/train/families/)
    num_layers: int = 2
    hidden_size: int = 64
    ffn_hidden_size: int = 192
    num_attention_heads: int = 4
    num_query_groups: int = 2
    kv_channels: int | None = None  # head dim; None = hidden_size // num_attention_heads
    vocab_size: int = 151936
    max_position_embeddings: int = 4096
    rotary_base: float = 1_000_000.0
    qk_layernorm: bool = True
    tie_embeddings: bool = True
    norm_epsilon: float = 1e-6
    init_method_std: float = 0.02
    # Context extension: RoPE scaling as Hugging Face's rope_parameters name it, so the exported
    # config.json makes inference engines compute the same positions. midtrain/train/hf_rope.py maps these
    # onto megatron-core (GPTModel kwargs + TransformerConfig yarn_* attributes) and onto HF.
    rope_scaling: Literal["none", "yarn", "llama3"] = "none"
    rope_scaling_factor: float = 1.0
    rope_original_max_position_embeddings: int | None = None  # context the RoPE base was trained at
    rope_low_freq_factor: float = 1.0  # llama3 only
    rope_high_freq_factor: float = 4.0  # llama3 only
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    # Mixture of experts (Qwen3-MoE shape, megatron-core's MoE layer in every decoder layer). None = dense.
    num_experts: int | None = None
    moe_ffn_hidden_size: int | None = None  # one expert's SwiGLU width (HF moe_intermediate_size)
    moe_router_topk: int = 2  # experts per token (HF num_experts_per_tok)
    moe_router_score_function: Literal["softmax", "sigmoid"] = "softmax"
    moe_router_topk_norm: bool = True  # renormalise the top-k scores to sum to 1 (HF norm_topk_prob)
    moe_load_balancing: Literal["aux_loss", "seq_aux_loss", "global_aux_loss", "none"] = "aux_loss"
    moe_aux_loss_coeff: float = 1e-3  # load-balancing loss weight (HF router_aux_loss_coef)
    moe_z_loss_coeff: float | None = None  # router z-loss weight (None = off)
    moe_shared_expert_ffn_hidden_size: int | None = None  # always-on shared expert(s) width; None = none
    moe_capacity_factor: float | None = None  # None = dropless (every token reaches its top-k experts)
    moe_grouped_gemm: bool = True  # grouped GEMM for the experts where Transformer Engine provides it

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def head_dim(self) -> int:
        """One attention head's width: kv_channels, or hidden_size / num_attention_heads."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    def mlp_params(self) -> tuple[int, int]:
        """(all, active per token) matmul parameters of one decoder layer's MLP, router included."""
        h = self.hidden_size
        if not self.is_moe:
            dense = 3 * h * self.ffn_hidden_size
            return dense, dense
        expert = 3 * h * int(self.moe_ffn_hidden_size or 0)
        shared = 3 * h * int(self.moe_shared_expert_ffn_hidden_size or 0)
        router = h * int(self.num_experts or 0)
        return int(self.num_experts or 0) * expert + shared + router, self.moe_router_topk * expert + shared + router

    def expert_params(self) -> int:
        """Routed-expert weights of one layer (split over expert-parallel ranks, not tensor-parallel ones)."""
        if not self.is_moe:
            return 0
        return int(self.num_experts or 0) * 3 * self.hidden_size * int(self.moe_ffn_hidden_size or 0)

    def param_count(self) -> ParamCount:
        """Parameter counts of the full (unsharded) model megatron-core builds for this shape."""
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_query_groups * d
        attn = h * (q + 2 * kv) + q * h  # qkv, proj
        mlp_all, mlp_active = self.mlp_params()  # fc1 (gate+up) + fc2; MoE: router + experts (+ shared)
        norms = 2 * h + (2 * d if self.qk_layernorm else 0)
        emb = self.vocab_size * h
        return ParamCount(
            embedding=emb,
            per_layer=attn + mlp_all + norms,
            num_layers=self.num_layers,
            final_norm=h,
            output_layer=0 if self.tie_embeddings else emb,
            matmul_per_layer=attn + mlp_active,
            output_matmul=emb,
            expert_per_layer=self.expert_params(),
            active_per_layer=attn + mlp_active + norms,
        )

    def check(self) -> None:
        families.family(self.family)  # refuses a name no spec registers, listing those that do
        require(self.num_layers > 0, "num_layers", "must be positive")
        if self.num_experts is not None:
            self._check_moe()
        require(
            self.hidden_size % self.num_attention_heads == 0 or self.kv_channels is not None,
            "hidden_size",
            f"{self.hidden_size} is not divisible by num_attention_heads="
            f"{self.num_attention_heads}; set kv_channels explicitly",
        )
        require(
            self.num_attention_heads % self.num_query_groups == 0,
            "num_query_groups",
            f"num_attention_heads={self.num_attention_heads} must be a multiple of num_query_groups="
            f"{self.num_query_groups}",
        )
        if self.rope_scaling != "none":
            self._check_rope_scaling()

    def _check_moe(self) -> None:
        require(
            self.num_experts is not None and self.num_experts >= 2,
            "num_experts",
            f"{self.num_experts}: a mixture needs at least 2 experts (null = dense model)",
        )
        require(
            self.moe_ffn_hidden_size is not None and self.moe_ffn_hidden_size > 0,
            "moe_ffn_hidden_size",
            "must be set (one expert's SwiGLU width) when num_experts is set",
        )
        require(
            1 <= self.moe_router_topk <= int(self.num_experts or 0),
            "moe_router_topk",
            f"{self.moe_router_topk} must be in [1, num_experts={self.num_experts}]",
        )
        require(self.moe_aux_loss_coeff >= 0, "moe_aux_loss_coeff", "must be >= 0")
        require(
            self.moe_z_loss_coeff is None or self.moe_z_loss_coeff > 0, "moe_z_loss_coeff", "must be > 0 (or null: off)"
        )
        require(
            self.moe_capacity_factor is None or self.moe_capacity_factor > 0,
            "moe_capacity_factor",
            "must be > 0 (or null: dropless)",
        )
        require(
            self.moe_shared_expert_ffn_hidden_size is None or self.moe_shared_expert_ffn_hidden_size > 0,
            "moe_shared_expert_ffn_hidden_size",
            "must be > 0 (or null: no shared expert)",
        )
        # megatron-core always renormalises sigmoid top-k scores (and cannot keep them raw)
        require(
            self.moe_router_score_function == "softmax" or self.moe_router_topk_norm,
            "moe_router_topk_norm",
            "sigmoid routing always renormalises the top-k scores in megatron-core; set moe_router_topk_norm=true",
        )

    def _check_rope_scaling(self) -> None:
        require(
            self.rope_scaling_factor > 1.0,
            "rope_scaling_factor",
            f"must be > 1 with rope_scaling={self.rope_scaling!r} (got {self.rope_scaling_factor})",
        )
        orig = self.rope_original_max_position_embeddings
        require(
            orig is not None and orig > 0,
            "rope_original_max_position_embeddings",
            f"required with rope_scaling={self.rope_scaling!r}: the context length the RoPE base was trained at",
        )
        require(
            orig is not None and orig < self.max_position_embeddings,
            "rope_original_max_position_embeddings",
            f"{orig} must be below max_position_embeddings={self.max_position_embeddings} (scaling extends it)",
        )
        if self.rope_scaling == "llama3":
            for name, value in MEGATRON_LLAMA3_FIXED.items():
                require(
                    getattr(self, name) == value,
                    name,
                    f"megatron-core's llama3 RoPE scaling is fixed at {name}={value} (Llama 3.1's); "
                    f"got {getattr(self, name)}",
                )
        if self.rope_scaling == "yarn":
            require(
                self.yarn_beta_fast > self.yarn_beta_slow > 0,
                "yarn_beta_fast",
                f"need yarn_beta_fast > yarn_beta_slow > 0 (got {self.yarn_beta_fast}, {self.yarn_beta_slow})",
            )
