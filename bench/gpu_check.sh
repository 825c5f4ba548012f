#!/usr/bin/env bash
# GPU check for one GPU machine (H200: Python 3.12 + torch, no network, no Transformer Engine), < 8 min.
#
#   bench/gpu_check.sh prepare      # HERE, with package-registry access: fetch the wheels the GPU machine
#                                   # lacks (megatron-core 0.16.1, PyYAML, numpy, packaging, pytest + deps) for
#                                   # CPython 3.12 into bench/wheels/ (not committed; carry it along)
#   bench/gpu_check.sh              # ON THE GPU MACHINE: unpack those wheels for whatever does not import,
#                                   # run the portable attention's no-leak tests on the GPU, then
#                                   # bench/gpu_throughput.py (16K/32K/64K, document masking vs causal)
#   bench/gpu_check.sh --cpu        # the same flow on CPU with a tiny model (tests/test_hf_gpu_check.py)
#   bench/gpu_check.sh --dry-run    # print what would run
#
# Environment: PYTHON (default python3.12, else python3), OUT (results folder, default out/gpu_check),
# WHEELS (default bench/wheels).
# Transformer Engine is not on that machine, so FP8 is not measured; the throughput table says so.
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
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" megatron-core==0.16.1 pyyaml numpy packaging pytest pluggy iniconfig pygments setuptools
  ls -l "$WHEELS"
  exit 0
fi

STEPS=(
  "unpack wheels from bench/wheels/ for modules that do not import (megatron, yaml, numpy, packaging, pytest)"
  "no-leak: $PYTHON -m pytest tests/test_train_model.py -q -m gpu (portable attention, packed == documents alone)"
  "throughput: $PYTHON bench/gpu_throughput.py --json $OUT/gpu_throughput.json (16K, 32K, 64K; --cpu: tiny)"
)
if [[ "$MODE" == "dry-run" ]]; then
  printf '%s\n' "${STEPS[@]}"
  exit 0
fi

START=$(date +%s)
SITE="$(mktemp -d)/site"
mkdir -p "$SITE" "$OUT"
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# 1. Dependencies: a wheel is a zip; unpacking it onto PYTHONPATH needs neither pip nor network.
for pair in megatron:megatron_core yaml:pyyaml numpy:numpy packaging:packaging pytest:pytest \
            pluggy:pluggy iniconfig:iniconfig pygments:pygments setuptools:setuptools; do
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
    print("Transformer Engine: present")
except Exception:
    print("Transformer Engine: not installed -> the local spec with the portable attention runs; FP8 is not measured")
PY

# 2. No-leak test of the portable document attention (the trainer's GPU test; packed == each document alone).
if [[ "$MODE" == "gpu" ]]; then
  timeout 120 "$PYTHON" -m pytest "$ROOT/tests/test_train_model.py" -q -m gpu -p no:cacheprovider \
    2>&1 | tee "$OUT/noleak.txt" | tail -5
  grep -q " passed" "$OUT/noleak.txt" || { echo "no-leak test did not pass" >&2; exit 4; }
else
  timeout 300 "$PYTHON" -m pytest "$ROOT/tests/test_train_model.py" -q -p no:cacheprovider \
    -k "packed_logits_equal_documents_alone" 2>&1 | tee "$OUT/noleak.txt" | tail -3
fi

# 3. Throughput and MFU, document masking vs full causal, FLOP-model prediction beside each.
EXTRA=()
[[ "$MODE" == "cpu" ]] && EXTRA=(--cpu)
timeout 360 "$PYTHON" "$ROOT/bench/gpu_throughput.py" "${EXTRA[@]}" --json "$OUT/gpu_throughput.json" \
  2>&1 | grep -v -i "warn" | tee "$OUT/gpu_throughput.txt"
echo "gpu_check: done in $(( $(date +%s) - START ))s; results in $OUT"
