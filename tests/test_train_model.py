"""Model provider: document masking (no leak), config translation for GPU recipes, layout validation."""

from __future__ import annotations

import pytest
import torch
from megatron.core.packed_seq_params import PackedSeqParams
from train_helpers import tiny_config

from midtrain.config import ConfigError
from midtrain.train import distributed
from midtrain.train.config import TrainConfig
from midtrain.train.model import build_gpt_model, build_transformer_config, count_parameters


@pytest.fixture
def model_parallel():
    distributed.initialize(seed=3)
    yield
    distributed.destroy()


def _thd(lengths: list[int], device: str = "cpu") -> tuple[torch.Tensor, PackedSeqParams]:
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    pos = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    psp = PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths)
    )
    return pos, psp


def _packed_vs_alone(model, lengths: list[int], vocab: int, device: str = "cpu"):
    toks = torch.randint(0, vocab, (1, sum(lengths)), generator=torch.Generator().manual_seed(0)).to(device)
    pos, psp = _thd(lengths, device)
    with torch.no_grad():
        packed = model(toks, pos, attention_mask=None, packed_seq_params=psp)
        outs, start = [], 0
        for n in lengths:
            p1, psp1 = _thd([n], device)
            outs.append(model(toks[:, start : start + n], p1, attention_mask=None, packed_seq_params=psp1))
            start += n
    return packed.float(), torch.cat(outs, dim=1).float(), toks, pos


@pytest.mark.parametrize("family", ["qwen3", "llama3"])
def test_packed_logits_equal_documents_alone(model_parallel, family):
    cfg = tiny_config(
        **{"model.family": family, "model.qk_layernorm": family == "qwen3", "model.tie_embeddings": family == "qwen3"}
    )
    model = build_gpt_model(cfg).eval()
    lengths = [7, 19, 1, 12, 25]
    packed, alone, toks, pos = _packed_vs_alone(model, lengths, cfg.model.vocab_size)
    assert packed.shape == (1, sum(lengths), cfg.model.vocab_size)
    assert (packed - alone).abs().max().item() < 1e-5
    # Negative control: the same tokens as one causal sequence do leak, so the comparison has teeth.
    with torch.no_grad():
        leaky = model(toks, pos, attention_mask=None).float()
    later = slice(lengths[0], None)
    assert (leaky[:, later] - alone[:, later]).abs().max().item() > 1e-3


def test_gradients_stay_inside_documents(model_parallel):
    """A loss on document B's logits gives zero gradient to document A's token embeddings."""
    cfg = tiny_config()
    model = build_gpt_model(cfg)
    lengths = [10, 14]
    toks = torch.randint(0, cfg.model.vocab_size, (1, 24), generator=torch.Generator().manual_seed(1))
    pos, psp = _thd(lengths)
    emb = model.embedding.word_embeddings
    captured: dict[str, torch.Tensor] = {}
    handle = emb.register_forward_hook(lambda m, i, o: captured.update(out=o))
    logits = model(toks, pos, attention_mask=None, packed_seq_params=psp)
    handle.remove()
    hidden = captured["out"]
    hidden.retain_grad()
    logits[:, 10:].sum().backward()
    assert hidden.grad is not None
    grad = hidden.grad.abs().sum(dim=-1).flatten()  # [s, b, h] -> per token
    assert grad[:10].max().item() == 0.0
    assert grad[10:].min().item() > 0.0


def test_parameter_count_matches_built_model(model_parallel):
    for tie in (True, False):
        cfg = tiny_config(**{"model.tie_embeddings": tie})
        model = build_gpt_model(cfg)
        assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)["total"]


def test_fp8_cp_recipe_translates_to_transformer_config():
    cfg = (
        TrainConfig()
        .apply_overrides(
            [
                "precision.fp8=hybrid",
                "precision.fp8_recipe=blockwise",
                "precision.fp8_bf16_first_layers=1",
                "precision.fp8_bf16_last_layers=2",
                "parallel.context=4",
                "parallel.tensor=2",
                "parallel.sequence_parallel=true",
                "model.num_layers=8",
                "data.seq_length=4096",
                "parallel.recompute=full",
            ]
        )
        .validate()
    )
    tc = build_transformer_config(cfg, impl="transformer_engine")
    assert (tc.fp8, tc.fp8_recipe) == ("hybrid", "blockwise")
    assert tc.first_last_layers_bf16 and tc.num_layers_at_start_in_bf16 == 1 and tc.num_layers_at_end_in_bf16 == 2
    assert tc.context_parallel_size == 4 and tc.cp_comm_type == "p2p"
    assert tc.tensor_model_parallel_size == 2 and tc.sequence_parallel
    assert tc.bf16 and tc.params_dtype == torch.bfloat16
    assert tc.recompute_granularity == "full" and tc.recompute_method == "uniform"
    assert tc.transformer_impl == "transformer_engine"
    assert tc.calculate_per_token_loss
    # Qwen3 shape
    assert tc.normalization == "RMSNorm" and tc.gated_linear_unit and tc.qk_layernorm
    assert tc.num_query_groups == 2 and not tc.add_bias_linear

    delayed = (
        TrainConfig()
        .apply_overrides(
            [
                "precision.fp8=e4m3",
                "precision.fp8_recipe=delayed",
                "precision.fp8_bf16_first_layers=0",
                "precision.fp8_bf16_last_layers=0",
                "precision.fp8_amax_history_len=16",
            ]
        )
        .validate()
    )
    tc = build_transformer_config(delayed, impl="transformer_engine")
    assert (tc.fp8, tc.fp8_recipe, tc.fp8_amax_history_len) == ("e4m3", "delayed", 16)
    assert not tc.first_last_layers_bf16


def test_local_spec_rejects_gpu_only_features_here():
    from midtrain.train.model import resolve_impl

    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only refusals")
    for override, field in (("parallel.context=2", "parallel.context"), ("precision.fp8=hybrid", "precision.fp8")):
        cfg = TrainConfig().apply_overrides([override, "model.num_layers=4"]).validate()  # impl auto
        with pytest.raises(ConfigError, match=field):
            resolve_impl(cfg)
    with pytest.raises(ConfigError, match="transformer_engine requested"):
        resolve_impl(TrainConfig().apply_overrides(["precision.transformer_impl=transformer_engine"]).validate())


@pytest.mark.parametrize(
    "overrides, field",
    [
        (
            ["model.num_attention_heads=6", "model.num_query_groups=3", "model.hidden_size=96", "parallel.tensor=4"],
            "parallel.tensor",
        ),
        (["model.num_query_groups=1", "parallel.tensor=2"], "parallel.tensor"),
        (["parallel.context=2", "precision.transformer_impl=local"], "parallel.context"),
        (["parallel.context=4", "data.seq_length=2044"], "data.seq_length"),
        (
            ["parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.context=2", "data.seq_length=2052"],
            "data.seq_length",
        ),
        (["parallel.sequence_parallel=true"], "sequence_parallel"),
        (["model.num_layers=3", "parallel.pipeline=2"], "parallel.pipeline"),
        (["precision.fp8=e4m3", "precision.transformer_impl=local"], "fp8"),
        (["precision.fp8=e4m3", "precision.fp8_recipe=delayed"], "fp8_recipe"),
        (["parallel.data=3", "optim.global_batch_size=4"], "optim.global_batch_size"),
    ],
)
def test_impossible_layouts_are_rejected_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        TrainConfig().apply_overrides(overrides).validate()


def test_world_size_must_fit_layout():
    from midtrain.train.layout import resolve_data_parallel

    cfg = TrainConfig().apply_overrides(["parallel.tensor=2", "optim.global_batch_size=6"]).validate()
    assert resolve_data_parallel(cfg, 4) == 2
    with pytest.raises(ConfigError, match="world size 3"):
        resolve_data_parallel(cfg, 3)
    with pytest.raises(ConfigError, match="global_batch_size"):
        resolve_data_parallel(cfg, 8)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_gpu_thd_packed_logits_equal_documents_alone(impl):
    """On a GPU: TE's THD attention (cu_seqlens) when installed, and the portable attention on CUDA."""
    from midtrain.train.model import te_available

    if impl == "transformer_engine" and not te_available():
        pytest.skip("Transformer Engine not installed")
    import torch.nn.functional as F

    distributed.initialize(seed=3)
    try:
        # TE's fused THD attention runs in bf16 (the portable path is checked in fp32, on logits). bf16 logits
        # of this model spread over several units, where one bf16 step is 0.016-0.06 and packed vs alone run
        # different kernels: compare per-token losses, whose rounding noise is a few such steps at most.
        dtype = "bf16" if impl == "transformer_engine" else "fp32"
        cfg = tiny_config(
            **{
                "precision.transformer_impl": impl,
                "precision.dtype": dtype,
                "model.hidden_size": 128,
                "model.ffn_hidden_size": 256,
                "model.init_method_std": 0.2,
            }
        )
        model = build_gpt_model(cfg).eval()
        lengths = [64, 128, 32, 32]
        packed, alone, toks, pos = _packed_vs_alone(model, lengths, cfg.model.vocab_size, "cuda")
        with torch.no_grad():  # negative control: one causal sequence over the same tokens leaks
            leaky = model(toks, pos, attention_mask=None).float()
        if dtype == "fp32":
            assert (packed - alone).abs().max().item() < 1e-4
            assert (leaky[:, 64:] - alone[:, 64:]).abs().max().item() > 1e-3
        labels = torch.roll(toks, -1, dims=1)[0]

        def token_losses(logits: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits[0], labels, reduction="none")

        diff = (token_losses(packed) - token_losses(alone)).abs()
        assert diff.mean().item() < 0.02 and diff.max().item() < 0.15, (diff.mean().item(), diff.max().item())
        leak = (token_losses(leaky)[64:] - token_losses(alone)[64:]).abs()
        assert leak.mean().item() > 0.3, leak.mean().item()  # leaking moves later documents' losses a lot
    finally:
        distributed.destroy()


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_gpu_train_steps_lower_the_loss(tmp_path, impl):
    """The same loop on one GPU (bf16): TE spec when installed, the portable attention on CUDA otherwise."""
    from train_helpers import write_shards

    from midtrain.train.model import te_available
    from midtrain.train.trainer import train

    if impl == "transformer_engine" and not te_available():
        pytest.skip("Transformer Engine not installed")
    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=256)
    cfg = tiny_config(
        **{
            "precision.transformer_impl": impl,
            "precision.dtype": "bf16",
            "data.path": str(shards),
            "data.seq_length": 256,
            "run_dir": str(tmp_path / "run"),
            "optim.train_steps": 12,
        }
    )
    try:
        result = train(cfg)
    finally:
        distributed.destroy()
    import json

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert result["exit_code"] == 0 and len(rows) == 12
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert rows[-1]["tflops_per_device"] > 0


@pytest.mark.gpu
def test_gpu_fp8_recipe_trains(tmp_path):
    from train_helpers import write_shards

    from midtrain.train.model import te_available
    from midtrain.train.trainer import train

    if not te_available():
        pytest.skip("Transformer Engine not installed")
    shards = write_shards(tmp_path / "shards", sequences=16, seq_length=256)
    cfg = tiny_config(
        **{
            "precision.fp8": "hybrid",
            "precision.fp8_recipe": "tensorwise",
            "precision.dtype": "bf16",
            "model.num_layers": 4,
            "model.hidden_size": 128,
            "model.ffn_hidden_size": 256,
            "precision.transformer_impl": "transformer_engine",
            "data.path": str(shards),
            "data.seq_length": 256,
            "run_dir": str(tmp_path / "run"),
            "optim.train_steps": 6,
        }
    )
    try:
        assert train(cfg)["exit_code"] == 0
    finally:
        distributed.destroy()


@pytest.mark.gpu
def test_gpu_portable_path_with_host_document_bounds_gives_the_same_logits():
    """The trainer keeps cu_seqlens on the host for the portable path (no GPU sync in megatron's unfused
    packed RoPE); the logits equal those with device cu_seqlens."""
    from train_helpers import packed_sample

    from midtrain.train.batch import to_batch

    distributed.initialize(seed=3)
    try:
        cfg = tiny_config(**{"precision.transformer_impl": "local", "precision.dtype": "fp32"})
        model = build_gpt_model(cfg).eval()
        sample = packed_sample([7, 19, 12, 26], cfg.model.vocab_size)
        out = []
        for host in (False, True):
            b = to_batch(sample, "cuda", cu_seqlens_on_host=host)
            assert b.packed_seq_params.cu_seqlens_q.device.type == ("cpu" if host else "cuda")
            assert b.tokens.device.type == "cuda"
            with torch.no_grad():
                out.append(model(b.tokens, b.position_ids, None, packed_seq_params=b.packed_seq_params))
        assert torch.equal(out[0], out[1])
    finally:
        distributed.destroy()
