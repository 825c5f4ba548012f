"""Backends of the portable document-masked attention: one varlen flash call (CUDA) or SDPA per document."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from megatron.core.packed_seq_params import PackedSeqParams
from train_helpers import tiny_config

from midtrain.config import ConfigError
from midtrain.train import distributed
from midtrain.train.attention import PortableDocumentAttention, choose_backend, varlen_unsupported
from midtrain.train.model import build_gpt_model


def _thd(lengths: list[int], device: str) -> tuple[torch.Tensor, PackedSeqParams]:
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    pos = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    return pos, PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                                max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths))


@pytest.fixture
def model_parallel():
    distributed.initialize(seed=3)
    yield
    distributed.destroy()


def test_auto_falls_back_to_per_document_where_varlen_cannot_run():
    q = torch.zeros(8, 4, 16)
    assert choose_backend("auto", q, 0.0) == "per_document"
    assert choose_backend("per_document", q, 0.0) == "per_document"
    assert "CUDA" in varlen_unsupported(q, 0.0) or "no torch.nn.attention.varlen" in varlen_unsupported(q, 0.0)


def test_explicit_varlen_that_cannot_run_names_the_setting_and_why():
    with pytest.raises(ValueError, match=r"precision.portable_attention=varlen cannot run here: .*(CUDA|varlen)"):
        choose_backend("varlen", torch.zeros(8, 4, 16), 0.0)
    with pytest.raises(ValueError, match="expected one of auto, varlen, per_document"):
        choose_backend("flash", torch.zeros(8, 4, 16), 0.0)


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="portable_attention"):
        tiny_config(**{"precision.portable_attention": "flash"})


@pytest.mark.parametrize("setting", ["auto", "per_document", "varlen"])
def test_the_setting_reaches_every_attention_layer(model_parallel, setting):
    cfg = tiny_config(**{"precision.portable_attention": setting, "precision.transformer_impl": "local"})
    layers = [m for m in build_gpt_model(cfg).modules() if isinstance(m, PortableDocumentAttention)]
    assert len(layers) == cfg.model.num_layers
    assert {m.backend for m in layers} == {setting}


def test_varlen_on_cpu_stops_the_forward_instead_of_silently_changing_kernel(model_parallel):
    cfg = tiny_config(**{"precision.portable_attention": "varlen", "precision.transformer_impl": "local"})
    model = build_gpt_model(cfg).eval()
    pos, psp = _thd([5, 9], "cpu")
    toks = torch.randint(0, cfg.model.vocab_size, (1, 14))
    with pytest.raises(ValueError, match="portable_attention=varlen"), torch.no_grad():
        model(toks, pos, attention_mask=None, packed_seq_params=psp)


@pytest.mark.gpu
def test_gpu_varlen_equals_per_document_and_does_not_leak():
    """bf16 on CUDA: the varlen kernel's per-token losses match per-document SDPA (different kernels, so
    within bf16 rounding), and a document's losses do not change when other documents are packed with it."""
    if varlen_unsupported(torch.zeros(1, 1, 16, device="cuda", dtype=torch.bfloat16), 0.0):
        pytest.skip(varlen_unsupported(torch.zeros(1, 1, 16, device="cuda", dtype=torch.bfloat16), 0.0))
    distributed.initialize(seed=3)
    try:
        cfg = tiny_config(**{"precision.transformer_impl": "local", "precision.dtype": "bf16",
                             "model.hidden_size": 128, "model.ffn_hidden_size": 256, "model.init_method_std": 0.2})
        model = build_gpt_model(cfg).eval()
        lengths = [64, 128, 32, 32]
        toks = torch.randint(0, cfg.model.vocab_size, (1, sum(lengths)),
                             generator=torch.Generator().manual_seed(0)).cuda()
        labels = torch.roll(toks, -1, dims=1)[0]
        pos, psp = _thd(lengths, "cuda")
        losses = {}
        for backend in ("per_document", "varlen"):
            for m in model.modules():
                if isinstance(m, PortableDocumentAttention):
                    m.backend = backend
            with torch.no_grad():
                logits = model(toks, pos, attention_mask=None, packed_seq_params=psp).float()
            losses[backend] = F.cross_entropy(logits[0], labels, reduction="none")
        diff = (losses["varlen"] - losses["per_document"]).abs()
        assert diff.mean().item() < 0.02 and diff.max().item() < 0.15, (diff.mean().item(), diff.max().item())
        with torch.no_grad():  # negative control: plain causal over the same tokens leaks across documents
            leaky = F.cross_entropy(model(toks, pos, attention_mask=None).float()[0], labels, reduction="none")
        assert (leaky[64:] - losses["varlen"][64:]).abs().mean().item() > 0.3
    finally:
        distributed.destroy()
