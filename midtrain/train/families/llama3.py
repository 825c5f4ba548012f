"""Llama 3 (``model.family=llama3``; also SmolLM2, which has Llama's shape): transformers' ``LlamaForCausalLM``."""

from __future__ import annotations

from midtrain.train.families.llama_layout import GLOBAL_ROWS, LAYER_ROWS
from midtrain.train.families.spec import HFArch, ModelFamily

LLAMA3 = ModelFamily(
    name="llama3",
    hf=HFArch("llama", "LlamaForCausalLM"),
    layer_rows=LAYER_ROWS,
    global_rows=GLOBAL_ROWS,
    qk_layernorm=False,
    hf_fixed={"mlp_bias": False},
    # no offline default tokenizer: an export takes the run's own (hf_source/, init_from or --tokenizer)
)
