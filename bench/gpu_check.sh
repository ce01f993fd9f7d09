#!/usr/bin/env bash
# The GPU check: one prepared script, under 8 minutes, for a machine with an NVIDIA GPU.
#
#   bash bench/gpu_check.sh [OUT]          # OUT defaults to build-gpu
#
# It runs profile `gpu` of matrix.toml: the corpus through both exporters at one opset, on one
# onnxruntime-gpu (CUDA and TensorRT execution providers) and on native TensorRT (its parser and
# builder), TensorRT at fp32 and fp16. It writes
#
#   OUT/shards/ortgpu-<v>-{cuda,tensorrt,tensorrt-fp16}.jsonl, OUT/shards/trt-<v>-{tensorrt,tensorrt-fp16}.jsonl
#   OUT/cuda_reference.jsonl    torch's own CUDA outputs against the CPU reference (bench/cuda_reference.py)
#   OUT/results/gpu/            the report of those shards (README.md, index.html, matrix.jsonl)
#   OUT/gpu_check.log           everything below, as it ran
#
# Needs: Python 3.11 with nox and uv (`pip install nox uv`), an NVIDIA driver, and PyPI plus
# pypi.nvidia.com (TensorRT's wheels are fetched from there). The CUDA, cuDNN and TensorRT libraries
# come as wheels (matrix.toml gpu_requirements); pycuda builds against the CUDA toolkit (cuda.h under
# CUDA_HOME or /usr/local/cuda). TORCH_PYTHON names an interpreter whose torch has CUDA, for the
# second reference (default python3; skipped when its torch sees no GPU).
#
# Time: every step gets what is left of GPU_CHECK_SECONDS (default 470; the export at most
# GPU_CHECK_EXPORT_SECONDS, 180), less the report's 45 s. The cells run first without
# latency; the latency pass comes after the second reference and is cut short when the budget ends:
# the run stage appends each cell and each timing as it arrives, so a cut costs only what was left,
# and the report shows what was measured. Without a GPU it still completes, in about 80 s: every
# GPU cell is `unavailable`, with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build-gpu}
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
BUDGET=${GPU_CHECK_SECONDS:-470}
REPORT_RESERVE=45
PROFILE=gpu
start=$SECONDS
EXPORT_CAP=${GPU_CHECK_EXPORT_SECONDS:-180}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
tee_pid=$!

left() { echo $((BUDGET - (SECONDS - start))); }
say() { echo "gpu_check [$((SECONDS - start))s]: $*"; }
step() {  # step SECONDS COMMAND...: the command under a deadline, TERM to its whole process group (the workers
  # too), KILL 5 s later; the run stage has appended every cell it finished, and a rerun resumes from there
  local limit=$(($1 - 5))
  shift
  if [ "$limit" -le 5 ]; then
    say "no time left for: $*"
    return 124
  fi
  timeout -s TERM -k 5 "$limit" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "cut short after ${limit}s: $*"; fi
  return $rc
}
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

say "budget ${BUDGET}s, output $OUT"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || say "nvidia-smi failed"
else
  say "no nvidia-smi: no NVIDIA driver here; every GPU cell will be unavailable, with the reason"
fi
timeout 60 python3 -m harness validate --matrix matrix.toml | grep -E "^($PROFILE|matrix)" || exit 2
mapfile -t SESSIONS < <(timeout 60 python3 -m harness sessions --profile "$PROFILE")
if [ "${#SESSIONS[@]}" -eq 0 ]; then
  say "profile $PROFILE has no runtimes (python3 -m harness sessions --profile $PROFILE)"
  exit 2
fi
say "runtimes: ${SESSIONS[*]}"

step "$(min "$EXPORT_CAP" $(($(left) - REPORT_RESERVE)))" nox -s export -- --profile "$PROFILE" --out "$OUT" || say "export ended with status $?"

for id in "${SESSIONS[@]}"; do  # correctness first, every column
  step "$(($(left) - REPORT_RESERVE))" nox -s "run($id)" -- --profile "$PROFILE" --out "$OUT" --no-latency || say "run($id) ended with status $?"
done

TORCH_PYTHON=${TORCH_PYTHON:-python3}
if timeout 60 "$TORCH_PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  step "$(($(left) - REPORT_RESERVE))" "$TORCH_PYTHON" bench/cuda_reference.py --out "$OUT" || say "cuda_reference ended with status $?"
else
  say "$TORCH_PYTHON has no torch that sees a GPU: no second reference"
fi

for id in "${SESSIONS[@]}"; do  # then latency: every cell is reused, only the timings run
  step "$(($(left) - REPORT_RESERVE))" nox -s "run($id)" -- --profile "$PROFILE" --out "$OUT" || say "latency of $id ended with status $?"
done

step "$(left)" nox -s report -- --profile "$PROFILE" --out "$OUT" --results "$OUT/results/$PROFILE" || say "report ended with status $?"

timeout 60 python3 bench/device_env.py --summary "$OUT/shards"
say "done in $((SECONDS - start))s"
exec >&- 2>&-
wait "$tee_pid"  # the log is whole before the script returns
