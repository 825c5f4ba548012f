"""GPU throughput: tokens/s and MFU of a ~1B Qwen3-shaped model, document masking vs full causal.

For each sequence length (default 32K, 64K, 128K, 256K) one packed batch of realistic document lengths is
trained on the same tokens with its document boundaries (THD cu_seqlens: each document attends only to
itself) and as a single causal sequence. Beside each measurement stands the FLOP model's prediction
(midtrain/train/flops.py, the count the trainer's MFU uses): FLOPs per token, and for the masked run the
speedup it predicts (causal FLOPs / masked FLOPs) next to the measured one. Without Transformer Engine the
masked batch runs once per portable attention backend that can run (per-document SDPA, and one varlen flash
call where torch offers it), side by side in the same process.

The model is build_gpt_model()'s (the trainer's model provider, with its final norm and tied output layer):
Transformer Engine's spec when TE imports, else the local spec with the portable document attention. The
loss is the model's next-token loss, its output layer applied in checkpointed 4K-token chunks so a 152K
vocabulary does not hold 256K x 152K logits (the same FLOPs).

Each row is written to --rows (JSON lines: a header, then one line per row, flushed as it finishes) and
printed as it finishes, so a run cut short keeps what it measured. A row that fails (out of memory or any
other error) is a row with its error, and the next one runs. --budget-s bounds the whole run: a row whose
predicted time (from the rows before it) does not fit what is left drops its warmup step, or is recorded
as skipped. Timed steps per row stop at --steps or once they took --row-seconds (at least one).

  .venv/bin/python bench/gpu_throughput.py --rows out/gpu_throughput.jsonl       # on a GPU
  .venv/bin/python bench/gpu_throughput.py --cpu                                 # tiny model, CPU (tests)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, cast

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_summary: the table, shared with the summary

import gpu_summary

from midtrain.train.config import TrainConfig

Recompute = Literal["none", "selective", "full"]  # ParallelConfig.recompute


def recompute_for(seq_length: int, choice: str, cpu: bool) -> Recompute:
    """Activation recompute per case: ``auto`` = none up to 32K, full from 64K (where a 1.1B model's
    activations do not fit 141 GB otherwise); selective recompute only re-runs core attention, which the
    flash/per-document kernels already keep small, so it does not make 64K fit."""
    if choice != "auto":
        return cast(Recompute, choice)  # argparse's choices
    return "none" if cpu or seq_length <= 32_768 else "full"


def bench_config(seq_length: int, cpu: bool, recompute: Recompute = "none") -> TrainConfig:
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
    return PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths)
    )


def chunked_lm_loss(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int = 4096
) -> torch.Tensor:
    """Mean next-token loss without holding all logits: each chunk's logits are recomputed in backward."""
    from torch.utils.checkpoint import checkpoint

    def piece(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy((h @ weight.t()).float(), y, reduction="sum")

    h = hidden.reshape(-1, hidden.shape[-1])
    total = sum(
        checkpoint(piece, h[i : i + chunk], labels[i : i + chunk], use_reentrant=False)
        for i in range(0, h.shape[0], chunk)
    )
    return total / h.shape[0]


@contextlib.contextmanager
def final_hidden(model: torch.nn.Module) -> Iterator[dict]:
    """Within the block the model's output layer gets no rows: its input (the final-normed hidden states)
    and the weight the model passes it are kept in the yielded dict, for chunked_lm_loss."""
    seen: dict = {}

    def keep(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        seen["hidden"] = args[0]
        seen["weight"] = kwargs.get("weight") if kwargs.get("weight") is not None else module.weight
        return (args[0][:0], *args[1:]), kwargs

    handle = model.get_submodule("output_layer").register_forward_pre_hook(keep, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(
    cfg: TrainConfig,
    lengths: list[int],
    steps: int,
    warmup: int,
    device: torch.device,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    impl: str = "local",
    row_seconds: float = 0.0,
) -> dict:
    """``warmup`` untimed steps, then timed steps until ``steps`` or, after the first, ``row_seconds``."""
    S = cfg.data.seq_length
    g = torch.Generator().manual_seed(S)
    tokens = torch.randint(0, cfg.model.vocab_size, (1, S + 1), generator=g).to(device)
    inputs, labels = tokens[:, :S], tokens[0, 1:]
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    # the portable path keeps document boundaries on the host (no GPU sync in megatron's packed RoPE)
    psp = _packed_params(lengths, device if impl == "transformer_engine" else torch.device("cpu"))

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with final_hidden(model) as out:
            model(inputs, position_ids, attention_mask=None, packed_seq_params=psp)
        loss = chunked_lm_loss(out["hidden"], out["weight"], labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())  # waits for the forward and backward

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    _sync(device)
    first = (time.perf_counter() - t0) / warmup if warmup else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0, done = time.perf_counter(), 0
    while done < max(1, steps) and (done == 0 or time.perf_counter() - t0 < row_seconds or not row_seconds):
        loss = step()
        done += 1
    _sync(device)
    seconds = (time.perf_counter() - t0) / done
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {
        "seconds_per_step": seconds,
        "tokens_per_s": S / seconds,
        "loss": loss,
        "peak_mem_gib": peak,
        "warmup_steps": warmup,
        "timed_steps": done,
        "warmup_s_per_step": first,
    }


def cases(seq_length: int, docs: list[int], impl: str, device: torch.device) -> list[tuple]:
    """(mode, document lengths, portable attention backend) per measurement of one sequence length: the
    document-masked batch with each backend that can run here (varlen only on CUDA bf16), then causal
    (documents first: under a tight budget they are what training runs)."""
    from midtrain.train.attention import varlen_unsupported

    if impl == "transformer_engine":  # TE's own THD attention: the portable backends are not used
        return [("documents", docs, None), ("causal", [seq_length], None)]
    out = [("documents", docs, "per_document")]
    probe = torch.zeros(1, 1, 128, device=device, dtype=torch.bfloat16)
    if varlen_unsupported(probe, 0.0) is None:
        out.append(("documents", docs, "varlen"))
    return [*out, ("causal", [seq_length], "per_document")]


def set_attention_backend(model: torch.nn.Module, backend: str | None) -> None:
    """Switch every portable attention layer to ``backend`` (the model stays the same object)."""
    from midtrain.train.attention import PortableDocumentAttention

    for m in model.modules():
        if backend and isinstance(m, PortableDocumentAttention):
            m.backend = backend


def write_row(stream: IO[str] | None, record: dict) -> None:
    """One JSON line, on disk before the next row starts (a run killed later keeps it)."""
    if stream is not None:
        stream.write(json.dumps(record) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def failed(error: BaseException | str) -> dict:
    """The row of a measurement that did not finish (its error's first line)."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {(str(error) or '-').splitlines()[0]}"
    return {
        "seconds_per_step": math.nan,
        "tokens_per_s": math.nan,
        "loss": None,
        "peak_mem_gib": math.nan,
        "warmup_steps": 0,
        "timed_steps": 0,
        "warmup_s_per_step": None,
        "error": text,
    }


def _free(device: torch.device, optimizer: torch.optim.Optimizer | None) -> None:
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_row(
    model_for,
    recompute: Recompute,
    backend: str | None,
    cfg: TrainConfig,
    lengths: list[int],
    steps: int,
    warmup: int,
    device: torch.device,
    impl: str,
    row_seconds: float,
) -> dict:
    """One measurement; a failure of any kind (out of memory, a kernel's error) is the row's error."""
    optimizer = None
    try:
        model, optimizer = model_for(recompute)
        set_attention_backend(model, backend)
        r = measure(cfg, lengths, steps, warmup, device, model, optimizer, impl, row_seconds)
        return {**r, "error": None}
    except Exception as e:  # noqa: BLE001 - a row that fails is a result; the next row still runs
        print(f"seq {cfg.data.seq_length} {backend or impl}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        _free(device, optimizer)
        return failed(e)


def plan_row(flops: float, rate: float | None, left: float | None, warmup: int) -> tuple[int, str | None]:
    """Warmup steps for a row that fits the budget left, or why it is skipped. ``rate``: FLOP/s of the last
    row measured (its step time times 1.3 for the estimate: full recompute and longer attention cost more)."""
    if left is None or rate is None:
        return warmup, None
    predicted = 1.3 * flops / rate
    if (warmup + 1) * predicted <= left:
        return warmup, None
    if predicted <= left:
        return 0, None
    return 0, f"skipped: predicted {predicted:.0f} s a step, {max(left, 0):.0f} s of --budget-s left"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="tiny model on CPU (checks the script, not the GPU)")
    ap.add_argument(
        "--seq", type=int, nargs="+", help="sequence lengths (default 32768 65536 131072 262144; --cpu: 256 512)"
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="most timed steps per row (default 5 up to 32K, 3 at 64K, 2 from 128K; --cpu 1)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed steps first in each row (default 1, 2 in the first row; --cpu 1)",
    )
    ap.add_argument(
        "--row-seconds",
        type=float,
        default=20.0,
        help="timed steps of a row stop once they took this long (default 20; 0 = no limit)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for the whole run: rows that would not fit drop their warmup or are skipped",
    )
    ap.add_argument(
        "--mean-doc-tokens",
        type=float,
        default=None,
        help="mean document length of the packed batch (default 3000; --cpu 60)",
    )
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="device peak for MFU (default: looked up from the GPU name, dense BF16)",
    )
    ap.add_argument(
        "--recompute",
        choices=["auto", "none", "selective", "full"],
        default="auto",
        help="activation recompute (default auto: none up to 32K, full from 64K)",
    )
    ap.add_argument("--rows", type=Path, help="write the header and each row here as JSON lines")
    args = ap.parse_args(argv)
    start = time.perf_counter()

    from midtrain.train import distributed
    from midtrain.train.estimate import memory_per_gpu
    from midtrain.train.flops import FLOPS_COUNT, peak_tflops, step_flops
    from midtrain.train.model import build_gpt_model, resolve_impl

    if not args.cpu and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu for the tiny CPU check", file=sys.stderr)
        return 2
    seqs = sorted(args.seq or ([256, 512] if args.cpu else [32_768, 65_536, 131_072, 262_144]))
    mean_doc = args.mean_doc_tokens or (60.0 if args.cpu else 3000.0)
    device = torch.device("cpu" if args.cpu else "cuda")
    torch.backends.cuda.matmul.allow_tf32 = True

    distributed.initialize(seed=1234)
    cfg = bench_config(max(seqs), args.cpu)
    impl = resolve_impl(cfg)
    built: dict[str, tuple] = {}  # one model (and optimizer) per recompute setting, built when first needed

    def model_for(recompute: Recompute):
        if recompute not in built:
            built.clear()  # free the previous model before building the next
            _free(device, None)
            m = build_gpt_model(bench_config(max(seqs), args.cpu, recompute), pre_process=True, post_process=True)
            built[recompute] = (m, torch.optim.AdamW(m.parameters(), lr=1e-5, fused=device.type == "cuda"))
        return built[recompute]

    peak = args.peak_tflops or peak_tflops(cfg)
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    header: dict[str, Any] = {
        "device": gpu,
        "torch": torch.__version__,
        "impl": impl,
        "params": cfg.model.param_count().total,
        "peak_tflops": peak,
        "flops_count": FLOPS_COUNT,
        "fp8": "not measured" + (" (no Transformer Engine)" if impl != "transformer_engine" else ""),
    }
    te_note = (
        "Transformer Engine present: TE spec (BF16; FP8 not part of this check)"
        if impl == "transformer_engine"
        else "no Transformer Engine: local spec + portable document attention; FP8 is not measured"
    )
    print(f"device: {gpu} | torch {torch.__version__} | model {header['params'] / 1e9:.2f}B params | {te_note}")
    print(
        f"FLOP count: {FLOPS_COUNT} (model FLOPs: recomputed activations are not counted, so full "
        f"recompute shows ~1/4 lower MFU for the same hardware rate)"
    )
    if peak:
        print(f"MFU against the dense BF16 peak, {peak} TFLOP/s per device")
    print(gpu_summary.ROW_HEAD, flush=True)

    rows: list[dict] = []
    rate: float | None = None  # FLOP/s of the last row measured, for the budget's predictions
    if args.rows:
        args.rows.parent.mkdir(parents=True, exist_ok=True)
    stream = args.rows.open("w") if args.rows else None
    write_row(stream, {"kind": "header", **header})
    for S in seqs:
        recompute = recompute_for(S, args.recompute, args.cpu)
        run_cfg = bench_config(S, args.cpu, recompute)
        steps = args.steps or (1 if args.cpu else 5 if S <= 32_768 else 3 if S <= 65_536 else 2)
        docs = document_lengths(S, seed=S, mean_tokens=mean_doc)
        for mode, lengths, backend in cases(S, docs, impl, device):
            flops = step_flops(run_cfg, [lengths])
            warmup = args.warmup if args.warmup is not None else 1 if args.cpu or rows else 2
            left = None if args.budget_s is None else args.budget_s - (time.perf_counter() - start)
            warmup, skip = plan_row(flops, rate, left, warmup)
            r = (
                failed(skip)
                if skip
                else run_row(
                    model_for, recompute, backend, run_cfg, lengths, steps, warmup, device, impl, args.row_seconds
                )
            )
            if r["error"] is None:
                rate = flops / r["seconds_per_step"]
            r.update(
                kind="row",
                seq_length=S,
                mode=mode,
                backend=backend or impl,
                recompute=recompute,
                documents=len(lengths),
                flops_per_token=flops / S,
                tflops=flops / r["seconds_per_step"] / 1e12,
                mfu=(flops / r["seconds_per_step"] / 1e12 / peak) if peak else None,
                # what `midtrain config`'s estimator predicts for this config on one device, beside the peak
                est_mem_gib=memory_per_gpu(run_cfg, num_gpus=1).total / 2**30,
            )
            rows.append(r)
            write_row(stream, r)
            print(gpu_summary.row_line(r), flush=True)
    if stream is not None:
        stream.close()
    print("\n".join(gpu_summary.throughput_table(header, rows)))
    distributed.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
