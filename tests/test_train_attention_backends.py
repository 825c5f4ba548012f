"""Backends of the portable document-masked attention: one varlen flash call (CUDA) or SDPA per document.

varlen_attn's keywords differ between torch releases; on CPU each release's signature is stood in for by a
function with exactly that signature that computes what the kernel computes (SDPA over each document, as
its keywords ask), and the varlen path must give the per-document backend's outputs and gradients."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig
from train_helpers import tiny_config

from midtrain.config import ConfigError
from midtrain.train import attention, distributed
from midtrain.train.attention import (
    PortableDocumentAttention,
    choose_backend,
    plan_varlen_call,
    varlen_call,
    varlen_unsupported,
)
from midtrain.train.model import build_gpt_model


def _thd(lengths: list[int], device: str) -> tuple[torch.Tensor, PackedSeqParams]:
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    pos = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    return pos, PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths)
    )


@pytest.fixture
def model_parallel():
    distributed.initialize(seed=3)
    yield
    distributed.destroy()


def test_auto_falls_back_to_per_document_where_varlen_cannot_run():
    q = torch.zeros(8, 4, 16)
    assert choose_backend("auto", q, 0.0) == "per_document"
    assert choose_backend("per_document", q, 0.0) == "per_document"
    why = varlen_unsupported(q, 0.0)
    assert why is not None and ("CUDA" in why or "no torch.nn.attention.varlen" in why)


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


def _documents_sdpa(query, key, value, cu, scale, causal, enable_gqa=False):
    """What varlen_attn computes: [t, h, d] per document, each document's tokens attending within it."""
    bounds = cu.tolist()

    def one(s: int, e: int) -> torch.Tensor:
        q, k, v = (x[s:e].transpose(0, 1) for x in (query, key, value))
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=enable_gqa)

    return torch.cat([one(s, e).transpose(0, 1) for s, e in zip(bounds[:-1], bounds[1:])])


def _same_heads(query, key):
    # 2.10 and 2.11 document key/value as (T, H, D): as many heads as the query
    assert key.shape[1] == query.shape[1], f"{key.shape[1]} key/value heads for {query.shape[1]} query heads"


def varlen_attn_2_10(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
    _same_heads(query, key)
    return _documents_sdpa(query, key, value, cu_seq_q, None, is_causal)  # the kernel's 1/sqrt(d)


def varlen_attn_2_11(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    _same_heads(query, key)
    return _documents_sdpa(query, key, value, cu_seq_q, scale, tuple(window_size) == (-1, 0))


def varlen_attn_2_12(
    query,
    key,
    value,
    cu_seq_q,
    cu_seq_k,
    max_q,
    max_k,
    *,
    return_aux=None,
    scale=None,
    window_size=(-1, -1),
    enable_gqa=False,
    seqused_k=None,
    block_table=None,
    num_splits=None,
):
    if not enable_gqa:
        _same_heads(query, key)
    return _documents_sdpa(query, key, value, cu_seq_q, scale, tuple(window_size) == (-1, 0), enable_gqa)


RELEASES = {"2.10": varlen_attn_2_10, "2.11": varlen_attn_2_11, "2.12+": varlen_attn_2_12}


@pytest.fixture
def fake_varlen(monkeypatch):
    """Install a stand-in varlen_attn and let the varlen backend run on CPU fp32 (the device and dtype checks
    are the only thing bypassed: the signature is read through the real varlen_call)."""
    varlen = pytest.importorskip("torch.nn.attention.varlen")  # torch 2.10+

    def install(fn):
        monkeypatch.setattr(varlen, "varlen_attn", fn)
        varlen_call.cache_clear()

    def signature_only(q, dropout_p):
        call = varlen_call()
        return call if isinstance(call, str) else None

    monkeypatch.setattr(attention, "varlen_unsupported", signature_only)
    yield install
    varlen_call.cache_clear()


def _core_attention(heads: int, groups: int, head_dim: int, softmax_scale: float | None):
    tc = TransformerConfig(
        num_layers=1,
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=head_dim,
        attention_dropout=0.0,
    )
    return PortableDocumentAttention(
        tc, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self", softmax_scale=softmax_scale
    )


def _prefixed(prefix: str) -> Callable[[str], str]:
    """assert_close's message: its own, after PREFIX (which tensor, which release)."""
    return lambda m: f"{prefix}: {m}"


def _run(layer, backend, q, k, v, psp, grad_out):
    layer.backend = backend
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = layer(q, k, v, None, packed_seq_params=psp)
    out.backward(grad_out)
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("release", RELEASES)
def test_varlen_call_follows_each_releases_signature(model_parallel, fake_varlen, release, scale):
    """GQA (4 query heads, 2 key/value groups) and, with scale=0.3, a softmax scale other than 1/sqrt(d):
    the varlen backend's outputs and q/k/v gradients equal per-document SDPA's."""
    fake_varlen(RELEASES[release])
    call = varlen_call()
    assert not isinstance(call, str), call
    assert call.causal == (("is_causal", True) if release == "2.10" else ("window_size", (-1, 0)))
    assert (call.takes_scale, call.takes_gqa) == (release != "2.10", release == "2.12+")
    layer = _core_attention(heads=4, groups=2, head_dim=16, softmax_scale=scale)
    lengths = [5, 9, 1, 7]
    _, psp = _thd(lengths, "cpu")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(sum(lengths), h, 16, generator=g) for h in (4, 2, 2))
    grad_out = torch.randn(sum(lengths), 4 * 16, generator=g)
    varlen = _run(layer, "varlen", q, k, v, psp, grad_out)
    per_document = _run(layer, "per_document", q, k, v, psp, grad_out)
    for name, a, b in zip(("output", "dq", "dk", "dv"), varlen, per_document):
        torch.testing.assert_close(a, b, msg=_prefixed(f"{release} {name}"))


def test_the_model_trains_the_same_through_the_2_11_varlen_call(model_parallel, fake_varlen):
    """The GPU machine's torch (2.11: window_size, scale, no enable_gqa): a tiny GQA model's per-token losses
    and every parameter's gradient equal the per-document backend's."""
    fake_varlen(varlen_attn_2_11)
    cfg = tiny_config(**{"precision.transformer_impl": "local", "model.init_method_std": 0.2})
    model = build_gpt_model(cfg)
    lengths = [20, 3, 31, 10]
    pos, psp = _thd(lengths, "cpu")
    toks = torch.randint(0, cfg.model.vocab_size, (1, sum(lengths)), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(toks, -1, dims=1)
    runs = {}
    for backend in ("per_document", "varlen"):
        for m in model.modules():
            if isinstance(m, PortableDocumentAttention):
                m.backend = backend
        model.zero_grad(set_to_none=True)
        losses = model(toks, pos, attention_mask=None, packed_seq_params=psp, labels=labels)
        losses.mean().backward()
        runs[backend] = (losses.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(runs["varlen"][0], runs["per_document"][0])
    assert runs["varlen"][1].keys() == runs["per_document"][1].keys()
    for name, grad in runs["per_document"][1].items():
        torch.testing.assert_close(runs["varlen"][1][name], grad, msg=_prefixed(name))


def test_a_signature_without_a_causal_keyword_falls_back_with_one_log_line(model_parallel, fake_varlen, caplog):
    def no_causal(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None):
        raise AssertionError("not to be called")

    fake_varlen(no_causal)
    q = torch.zeros(8, 4, 16)
    with caplog.at_level(logging.WARNING, logger="midtrain.train.attention"):
        assert [choose_backend("auto", q, 0.0) for _ in range(3)] == ["per_document"] * 3
        with pytest.raises(
            ValueError, match="portable_attention=varlen cannot run here: .*neither window_size nor is_causal"
        ):
            choose_backend("varlen", q, 0.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "midtrain.train.attention"]
    assert len(lines) == 1 and "neither window_size nor is_causal" in lines[0] and "per-document" in lines[0]


def test_a_signature_without_the_seven_positional_arguments_is_refused():
    def short(query, key, value, cu_seq, max_len, *, window_size=(-1, -1)):
        raise AssertionError("not to be called")

    refused = plan_varlen_call(short)
    assert isinstance(refused, str) and "positional arguments" in refused


def test_the_installed_torchs_varlen_signature_is_understood():
    """torch 2.12+ (this venv's) takes enable_gqa: the key/value heads go in unrepeated."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 12):
        pytest.skip(f"torch {torch.__version__}: the fakes above cover its signature")
    call = plan_varlen_call(pytest.importorskip("torch.nn.attention.varlen").varlen_attn)
    assert not isinstance(call, str), call
    assert call.causal == ("window_size", (-1, 0)) and call.takes_scale and call.takes_gqa


@pytest.mark.gpu
def test_gpu_varlen_kernel_matches_per_document_sdpa_and_does_not_leak(model_parallel):
    """bf16 on CUDA, one layer's core attention (Qwen3's head dim 128, 4 query heads per key/value head):
    the varlen kernel's output and q/k/v gradients are as close to an fp32 per-document reference as bf16
    per-document SDPA's are; a document's output does not change when the other documents change, and a
    loss on one document gives exactly zero gradient to every other document's q, k and v."""
    probe = torch.zeros(1, 1, 128, device="cuda", dtype=torch.bfloat16)
    if why := varlen_unsupported(probe, 0.0):
        pytest.skip(why)
    layer = _core_attention(heads=8, groups=2, head_dim=128, softmax_scale=None)
    lengths = [300, 1000, 37, 700, 11]
    _, psp = _thd(lengths, "cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(sum(lengths), h, 128, generator=g, device="cuda") for h in (8, 2, 2))
    grad_out = torch.randn(sum(lengths), 8 * 128, generator=g, device="cuda")
    reference = _run(layer, "per_document", q, k, v, psp, grad_out)  # fp32
    bq, bk, bv, bgrad = (x.bfloat16() for x in (q, k, v, grad_out))
    for name, varlen, per_doc, ref in zip(
        ("output", "dq", "dk", "dv"),
        _run(layer, "varlen", bq, bk, bv, psp, bgrad),
        _run(layer, "per_document", bq, bk, bv, psp, bgrad),
        reference,
    ):
        err_varlen = ((varlen.float() - ref).abs().max() / ref.abs().max()).item()
        err_sdpa = ((per_doc.float() - ref).abs().max() / ref.abs().max()).item()
        assert err_varlen < 2 * err_sdpa + 4e-3 and err_varlen < 2e-2, (name, err_varlen, err_sdpa)
    s, e = 300, 1300  # document 1
    others = torch.ones(sum(lengths), 1, 1, device="cuda")
    others[s:e] = 0
    cq, ck, cv = ((x + 3 * others * torch.randn_like(x)).bfloat16() for x in (q, k, v))
    one_doc = torch.zeros_like(bgrad)
    one_doc[s:e] = bgrad[s:e]
    base = _run(layer, "varlen", bq, bk, bv, psp, one_doc)
    moved = _run(layer, "varlen", cq, ck, cv, psp, one_doc)
    assert (base[0][s:e].float() - moved[0][s:e].float()).abs().max().item() <= 1e-3 * base[0].abs().max().item()
    for grad in base[1:]:
        assert grad[:s].abs().max().item() == 0 and grad[e:].abs().max().item() == 0
        assert grad[s:e].abs().max().item() > 0


@pytest.mark.gpu
def test_gpu_varlen_equals_per_document_and_does_not_leak():
    """bf16 on CUDA: the varlen kernel's per-token losses match per-document SDPA (different kernels, so
    within bf16 rounding), and a document's losses do not change when other documents are packed with it."""
    if why := varlen_unsupported(torch.zeros(1, 1, 16, device="cuda", dtype=torch.bfloat16), 0.0):
        pytest.skip(why)
    distributed.initialize(seed=3)
    try:
        cfg = tiny_config(
            **{
                "precision.transformer_impl": "local",
                "precision.dtype": "bf16",
                "model.hidden_size": 128,
                "model.ffn_hidden_size": 256,
                "model.init_method_std": 0.2,
            }
        )
        model = build_gpt_model(cfg).eval()
        lengths = [64, 128, 32, 32]
        toks = torch.randint(
            0, cfg.model.vocab_size, (1, sum(lengths)), generator=torch.Generator().manual_seed(0)
        ).cuda()
        labels = torch.roll(toks, -1, dims=1)[0]
        pos, psp = _thd(lengths, "cuda")
        losses, grads = {}, {}
        for backend in ("per_document", "varlen"):
            for m in model.modules():
                if isinstance(m, PortableDocumentAttention):
                    m.backend = backend
            model.zero_grad(set_to_none=True)
            logits = model(toks, pos, attention_mask=None, packed_seq_params=psp).float()
            losses[backend] = F.cross_entropy(logits[0], labels, reduction="none")
            losses[backend].mean().backward()
            losses[backend] = losses[backend].detach()
            grads[backend] = torch.cat([p.grad.float().flatten() for p in model.parameters()])
        diff = (losses["varlen"] - losses["per_document"]).abs()
        assert diff.mean().item() < 0.02 and diff.max().item() < 0.15, (diff.mean().item(), diff.max().item())
        # gradients through different kernels in bf16: the same direction and size within bf16 rounding
        a, b = grads["varlen"], grads["per_document"]
        assert F.cosine_similarity(a, b, dim=0).item() > 0.99 and ((a - b).norm() / b.norm()).item() < 0.1
        with torch.no_grad():  # negative control: plain causal over the same tokens leaks across documents
            leaky = F.cross_entropy(model(toks, pos, attention_mask=None).float()[0], labels, reduction="none")
        assert (leaky[64:] - losses["varlen"][64:]).abs().mean().item() > 0.3
    finally:
        distributed.destroy()
