"""GPU throughput: tokens/s and MFU of a ~1B Qwen3-shaped model, document masking vs full causal.

For each sequence length (default 16K, 32K, 64K) one packed batch of realistic document lengths is
trained twice on the same tokens: once with its document boundaries (THD cu_seqlens: each document
attends only to itself) and once as a single causal sequence. Beside each measurement stands the FLOP
model's prediction (midtrain/train/flops.py, the count the trainer's MFU uses): FLOPs per token, and for
the masked run the speedup it predicts (causal FLOPs / masked FLOPs) next to the measured one. Without
Transformer Engine the masked batch runs once per portable attention backend that can run (per-document
SDPA, and one varlen flash call where torch offers it), side by side in the same process.

The model is build_gpt_model()'s (the trainer's model provider): Transformer Engine's spec when TE
imports, else the local spec with the portable per-document attention. The loss head is computed in
checkpointed 4K-token chunks so a 152K vocabulary does not hold 64K x 152K logits (the same FLOPs).

  .venv/bin/python bench/gpu_throughput.py --json out/gpu_throughput.json     # on a GPU
  .venv/bin/python bench/gpu_throughput.py --cpu                               # tiny model, CPU (tests)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from midtrain.train.config import TrainConfig


def recompute_for(seq_length: int, choice: str, cpu: bool) -> str:
    """Activation recompute per case: ``auto`` = none up to 32K, full from 64K (where a 1.1B model's
    activations do not fit 141 GB otherwise); selective recompute only re-runs core attention, which the
    flash/per-document kernels already keep small, so it does not make 64K fit."""
    if choice != "auto":
        return choice
    return "none" if cpu or seq_length <= 32_768 else "full"


def bench_config(seq_length: int, cpu: bool, recompute: str = "none") -> TrainConfig:
    """~1.1B Qwen3-shaped (the Qwen3-1.7B layer shape, 16 layers, tied 151,936 vocabulary) or a CPU toy."""
    cfg = TrainConfig(name="gpu_throughput", seed=1234)
    m = cfg.model
    if cpu:
        m.num_layers, m.hidden_size, m.ffn_hidden_size = 2, 64, 128
        m.num_attention_heads, m.num_query_groups, m.kv_channels, m.vocab_size = 4, 2, 16, 512
        cfg.precision.dtype = "fp32"
    else:
        m.num_layers, m.hidden_size, m.ffn_hidden_size = 16, 2048, 6144
        m.num_attention_heads, m.num_query_groups, m.kv_channels, m.vocab_size = 16, 8, 128, 151_936
        cfg.precision.dtype = "bf16"
    m.family, m.qk_layernorm, m.tie_embeddings = "qwen3", True, True
    m.max_position_embeddings = max(seq_length, 4096)
    cfg.data.seq_length = seq_length
    cfg.precision.transformer_impl = "auto"
    cfg.parallel.recompute = recompute
    return cfg.validate()


def document_lengths(seq_length: int, seed: int, mean_tokens: float) -> list[int]:
    """Lengths of the documents packed into one sequence: log-normal around ``mean_tokens`` (a mix of
    short commits/PRs and long repository files), the last one cut to fill the sequence exactly."""
    g = torch.Generator().manual_seed(seed)
    mu = math.log(mean_tokens) - 0.5 * 1.2**2
    out, total = [], 0
    while total < seq_length:
        n = int(torch.empty(1).log_normal_(mu, 1.2, generator=g).clamp(min=16).item())
        n = min(n, seq_length - total)
        out.append(n)
        total += n
    return out


def _packed_params(lengths: list[int], device: torch.device):
    from megatron.core.packed_seq_params import PackedSeqParams

    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths),
                           max_seqlen_kv=max(lengths))


def chunked_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                    chunk: int = 4096) -> torch.Tensor:
    """Mean next-token loss without holding all logits: each chunk's logits are recomputed in backward."""
    from torch.utils.checkpoint import checkpoint

    def piece(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy((h @ weight.t()).float(), y, reduction="sum")

    h = hidden.reshape(-1, hidden.shape[-1])
    total = sum(checkpoint(piece, h[i:i + chunk], labels[i:i + chunk], use_reentrant=False)
                for i in range(0, h.shape[0], chunk))
    return total / h.shape[0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(cfg: TrainConfig, lengths: list[int], steps: int, warmup: int, device: torch.device,
            model: torch.nn.Module, optimizer: torch.optim.Optimizer, impl: str = "local") -> dict:
    S = cfg.data.seq_length
    g = torch.Generator().manual_seed(S)
    tokens = torch.randint(0, cfg.model.vocab_size, (1, S + 1), generator=g).to(device)
    inputs, labels = tokens[:, :S], tokens[0, 1:]
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    # the portable path keeps document boundaries on the host (no GPU sync in megatron's packed RoPE)
    psp = _packed_params(lengths, device if impl == "transformer_engine" else torch.device("cpu"))
    weight = model.embedding.word_embeddings.weight

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        hidden = model(inputs, position_ids, attention_mask=None, packed_seq_params=psp)
        loss = chunked_lm_loss(hidden, weight, labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    for _ in range(warmup):
        step()
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    _sync(device)
    seconds = (time.perf_counter() - t0) / steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {"seconds_per_step": seconds, "tokens_per_s": S / seconds, "loss": loss, "peak_mem_gib": peak}


def cases(seq_length: int, docs: list[int], impl: str, device: torch.device) -> list[tuple]:
    """(mode, document lengths, portable attention backend) per measurement of one sequence length: causal,
    then document-masked with each backend that can run here side by side (varlen only on CUDA bf16)."""
    from midtrain.train.attention import varlen_unsupported

    if impl == "transformer_engine":  # TE's own THD attention: the portable backends are not used
        return [("causal", [seq_length], None), ("documents", docs, None)]
    out = [("causal", [seq_length], "per_document"), ("documents", docs, "per_document")]
    probe = torch.zeros(1, 1, 128, device=device, dtype=torch.bfloat16)
    if varlen_unsupported(probe, 0.0) is None:
        out.append(("documents", docs, "varlen"))
    return out


def set_attention_backend(model: torch.nn.Module, backend: str | None) -> None:
    """Switch every portable attention layer to ``backend`` (the model stays the same object)."""
    from midtrain.train.attention import PortableDocumentAttention

    for m in model.modules():
        if backend and isinstance(m, PortableDocumentAttention):
            m.backend = backend


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="tiny model on CPU (checks the script, not the GPU)")
    ap.add_argument("--seq", type=int, nargs="+", help="sequence lengths (default 16384 32768 65536; "
                                                       "--cpu: 256 512)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per case (default 5, 3 from 64K; --cpu 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 2, 1 from 64K; --cpu 1)")
    ap.add_argument("--mean-doc-tokens", type=float, default=None,
                    help="mean document length of the packed batch (default 3000; --cpu 60)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="device peak for MFU (default: looked up from the GPU name, dense BF16)")
    ap.add_argument("--recompute", choices=["auto", "none", "selective", "full"], default="auto",
                    help="activation recompute (default auto: none up to 32K, full from 64K)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    from midtrain.train import distributed
    from midtrain.train.flops import FLOPS_COUNT, peak_tflops, step_flops
    from midtrain.train.model import build_gpt_model, resolve_impl

    if not args.cpu and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu for the tiny CPU check", file=sys.stderr)
        return 2
    seqs = args.seq or ([256, 512] if args.cpu else [16_384, 32_768, 65_536])
    steps = args.steps or (1 if args.cpu else 5)
    warmup = args.warmup if args.warmup is not None else (1 if args.cpu else 2)
    mean_doc = args.mean_doc_tokens or (60.0 if args.cpu else 3000.0)
    device = torch.device("cpu" if args.cpu else "cuda")
    torch.backends.cuda.matmul.allow_tf32 = True

    distributed.initialize(seed=1234)
    cfg = bench_config(max(seqs), args.cpu)
    impl = resolve_impl(cfg)
    built: dict[str, tuple] = {}  # one model (and optimizer) per recompute setting, built when first needed

    def model_for(recompute: str):
        if recompute not in built:
            for other in list(built):  # free the previous model before building the next
                del built[other]
            if device.type == "cuda":
                torch.cuda.empty_cache()
            m = build_gpt_model(bench_config(max(seqs), args.cpu, recompute), pre_process=True,
                                post_process=False)
            built[recompute] = (m, torch.optim.AdamW(m.parameters(), lr=1e-5, fused=device.type == "cuda"))
        return built[recompute]

    model, _ = model_for(recompute_for(min(seqs), args.recompute, args.cpu))
    peak = args.peak_tflops or peak_tflops(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    te_note = ("Transformer Engine present: TE spec (BF16; FP8 not part of this check)" if impl == "transformer_engine"
               else "no Transformer Engine: local spec + portable per-document attention; FP8 is not measured")
    print(f"device: {gpu} | torch {torch.__version__} | model {n_params / 1e9:.2f}B params | {te_note}")
    print(f"FLOP count: {FLOPS_COUNT} (model FLOPs: recomputed activations are not counted, so full "
          f"recompute shows ~1/4 lower MFU for the same hardware rate)")
    if peak:
        print(f"MFU against the dense BF16 peak, {peak} TFLOP/s per device")

    rows = []
    for S in sorted(seqs):
        recompute = recompute_for(S, args.recompute, args.cpu)
        run_cfg = bench_config(S, args.cpu, recompute)
        model, optimizer = model_for(recompute)
        docs = document_lengths(S, seed=S, mean_tokens=mean_doc)
        for mode, lengths, backend in cases(S, docs, impl, device):
            set_attention_backend(model, backend)
            flops = step_flops(run_cfg, [lengths])
            try:
                # from 64K a step takes seconds: fewer steps keep the whole check within its time
                long = S >= 65_536 and not args.cpu
                r = measure(run_cfg, lengths, args.steps or 3 if long else steps,
                            args.warmup if args.warmup is not None else 1 if long else warmup,
                            device, model, optimizer, impl)
            except torch.cuda.OutOfMemoryError as e:  # report the length that does not fit, keep going
                print(f"seq {S} {mode}: out of memory ({str(e).splitlines()[0]})", file=sys.stderr)
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                r = {"seconds_per_step": float("nan"), "tokens_per_s": float("nan"), "loss": None,
                     "peak_mem_gib": float("nan"), "error": "out of memory"}
            r.update(seq_length=S, mode=mode, backend=backend or impl, recompute=recompute, documents=len(lengths),
                     flops_per_token=flops / S,
                     tflops=flops / r["seconds_per_step"] / 1e12,
                     mfu=(flops / r["seconds_per_step"] / 1e12 / peak) if peak else None)
            rows.append(r)
        causal = next(r for r in rows if r["seq_length"] == S and r["mode"] == "causal")
        for masked in (r for r in rows if r["seq_length"] == S and r["mode"] == "documents"):
            masked["predicted_speedup"] = causal["flops_per_token"] / masked["flops_per_token"]
            masked["measured_speedup"] = causal["seconds_per_step"] / masked["seconds_per_step"]

    head = (f"{'seq':>6} {'mode':>9} {'attention':>12} {'recompute':>9} {'docs':>5} {'tok/s':>9} {'TFLOP/s':>8} "
            f"{'MFU':>6} {'GFLOP/tok':>9} {'speedup (FLOP model | measured)':>32} {'peak GiB':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        sp = (f"{r['predicted_speedup']:.2f}x | {r['measured_speedup']:.2f}x" if "predicted_speedup" in r else "")
        print(f"{r['seq_length']:>6} {r['mode']:>9} {r['backend']:>12} {r['recompute']:>9} {r['documents']:>5} "
              f"{r['tokens_per_s']:>9.0f} {r['tflops']:>8.1f} {mfu:>6} {r['flops_per_token'] / 1e9:>9.2f} {sp:>32} "
              f"{r['peak_mem_gib']:>8.1f}")
    result = {"device": gpu, "torch": torch.__version__, "impl": impl, "params": n_params, "peak_tflops": peak,
              "flops_count": FLOPS_COUNT, "fp8": "not measured (no Transformer Engine)" if impl != "transformer_engine"
              else "not measured", "rows": rows}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    distributed.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
