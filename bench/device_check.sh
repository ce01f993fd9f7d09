#!/usr/bin/env bash
# The device check: profile `gpu` on an offline GPU host (an NVIDIA GPU and its driver, a Python with numpy,
# protobuf, flatbuffers and packaging, torch with CUDA for its CUDA/cuDNN libraries and the second reference; no
# network, no onnxruntime-gpu, TensorRT optional), in ONE command there of about 6 minutes.
# Everything that can be done without a GPU is done here, before and after that command
# (docs/runtimes.md, "An offline GPU host"):
#
#   bash bench/device_check.sh prepare      # here: export profile gpu (opset 18, both exporters) into build-gpu/,
#                                           # pack it and onnxruntime-gpu into .device/, take results/ out of the
#                                           # tree that travels, check the upload limit, print the host's command
#   (on the GPU host)                       # there: `bash bench/device_check.sh remote`, with .device/ sent along
#   bash bench/device_check.sh collect DIR  # here: results/ back, the returned shards gathered (refused if not
#                                           # whole), reported into results/gpu/ with the host's facts
#   bash bench/device_check.sh restore      # here: results/ back into the checkout (collect does it too)
#   bash bench/device_check.sh dry-run DIR  # all of it on this CPU machine, into DIR, the checkout untouched
#
# `remote`, on the GPU host, within DEVICE_CHECK_SECONDS (default 360: the host's time budget, less start-up), each step under a timeout of
# its own so a slow step still leaves every finished cell (the run stage appends each cell as it comes):
#   1. unpacks the carried onnxruntime-gpu and the export; builds a run environment of its own (a venv holding
#      that onnxruntime-gpu, the host's numpy/protobuf/flatbuffers/packaging and the harness: an onnxruntime the
#      host's Python already has is not in it), with torch's CUDA 13 and cuDNN 9 libraries on
#      LD_LIBRARY_PATH; prints nvidia-smi, the versions and a smoke test (a Conv on CUDA against the CPU,
#      get_providers() checked);
#   2. the run stage, correctness only: onnxruntime-gpu's cuda, tensorrt, tensorrt-fp16 and cpu columns, then
#      native TensorRT's (`unavailable` where the host has no TensorRT, with the host's own reason);
#   3. bench/cuda_reference.py with the host's torch: torch's CUDA outputs against the CPU reference;
#   4. the run stage again: every cell reused, the IOBinding latency pass only;
#   5. $OUT: device_check.log, environment.json (GPU, driver, CUDA, cuDNN, packages), device_check.tar.xz
#      (the shards, their seals, the frontier, the run logs, cuda_reference.jsonl): 3 files.
#
# Files: .device/ort-site.tar.xz (the unpacked onnxruntime-gpu 1.31.1 wheel for the host's Python and platform,
# as tar.xz, shrunk to fit the upload limit where needed; or DEVICE_CHECK_ORT=FILE: see docs/runtimes.md),
# .device/export.tar.xz (made by prepare). The published results/ (about 75 MiB) does not fit a 64 MiB upload beside
# the package: prepare takes it out of the working tree with git's sparse checkout (the files stay committed,
# nothing is deleted), and `nox -s matrix` refuses to publish while it is out, saying to run `restore`.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-}
MATRIX=${DEVICE_CHECK_MATRIX:-matrix.toml}
MATRIX_ARG=()  # nox's sessions read the project's matrix.toml and take no --matrix: passed only when another is named
[ -n "${DEVICE_CHECK_MATRIX:-}" ] && MATRIX_ARG=(--matrix "$DEVICE_CHECK_MATRIX")
PROFILE=gpu
BUILD=${DEVICE_CHECK_BUILD:-build-gpu}
PACK=${DEVICE_CHECK_PACK:-.device}
ORT_PIN=onnxruntime-gpu==1.31.1
TRT_PIN=tensorrt==10.13.3.9
LIMIT_MIB=${DEVICE_CHECK_UPLOAD_MIB:-64}  # what one upload to the GPU host may carry (tree + packages)
start=$SECONDS

say() { echo "device_check [$((SECONDS - start))s]: $*"; }
die() { echo "device_check: $*" >&2; exit 2; }
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
case "$PACK" in /*) ;; *) PACK="$ROOT/$PACK" ;; esac

# --- here ----------------------------------------------------------------------------------------------------

export_and_pack() {  # the export of profile gpu, packed with every file the run stage checks (about 2 MB as xz)
  local export_cmd=${DEVICE_CHECK_EXPORT:-nox -s export --}
  local cases=()
  [ -n "${DEVICE_CHECK_CASES:-}" ] && cases=(--cases "$DEVICE_CHECK_CASES")
  say "export: $export_cmd ${MATRIX_ARG[*]} --profile $PROFILE --out $BUILD ${cases[*]}"
  $export_cmd "${MATRIX_ARG[@]}" --profile "$PROFILE" --out "$BUILD" "${cases[@]}" || die "the export failed (see above); nothing was packed"
  mkdir -p "$PACK"
  python3 bench/device_env.py --pack "$PACK/export.tar.xz" "$BUILD" manifest.json export.stamp.json artifacts frontier/models \
    || die "packing the export failed"
  say "packed $(du -h "$PACK/export.tar.xz" | cut -f1) of export into $PACK/export.tar.xz"
}

traveling_mib() {  # what goes to the GPU host: tracked and untracked-not-ignored files in the tree, plus .device
  python3 - "$PACK" <<'EOF'
import os, subprocess, sys
names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True).stdout.split(b"\0")
tree = sum(os.path.getsize(n) for n in names if n and os.path.isfile(n))
pack = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(sys.argv[1]) for f in fs)
print(f"{tree / 2**20:.1f} {pack / 2**20:.1f}")
EOF
}

prepare() {
  local ort=${DEVICE_CHECK_ORT:-$PACK/ort-site.tar.xz}
  [ -f "$ort" ] || die "$ort: no onnxruntime-gpu package for the GPU host; pack the unpacked $ORT_PIN wheel for the host's Python as $PACK/ort-site.tar.xz, or name it with DEVICE_CHECK_ORT=FILE (docs/runtimes.md, \"An offline GPU host\")"
  [ "$ort" -ef "$PACK/ort-site.tar.xz" ] || { mkdir -p "$PACK" && cp "$ort" "$PACK/ort-site.tar.xz"; }
  export_and_pack
  # results/ out of the traveling tree: skip-worktree on its files (git sparse checkout), nothing deleted from git
  git diff --quiet -- results || die "results/ has changes not committed: commit them first (they cannot leave the tree)"
  git sparse-checkout set --no-cone '/*' '!/results/' || die "git sparse-checkout failed; run: bash bench/device_check.sh restore"
  read -r tree pack < <(traveling_mib)
  say "the call carries ${tree} MiB of tree and ${pack} MiB of $PACK (limit ${LIMIT_MIB} MiB)"
  if python3 -c "import sys; sys.exit(0 if $tree + $pack <= $LIMIT_MIB else 1)"; then
    say "ready. The one command on the GPU host, from this tree:"
    echo "  command: bash bench/device_check.sh remote    carry: [\"${PACK#"$ROOT"/}\"]    time limit: 400 s  (the budget, DEVICE_CHECK_SECONDS, and start-up)"
    echo "then: bash bench/device_check.sh collect <the folder its \$OUT files came back to>   (brings results/ back)"
  else
    restore >/dev/null
    die "${tree} + ${pack} MiB is over the ${LIMIT_MIB} MiB a call carries (results/ is back): look for large untracked files (git status --short), then run prepare again"
  fi
}

restore() {
  if [ "$(git config --bool core.sparseCheckout || true)" = "true" ]; then
    git sparse-checkout disable || die "git sparse-checkout disable failed: run it by hand"
    say "results/ is back in the checkout"
  fi
}

collect() {  # DIR: the files the host's command wrote into $OUT (device_check.tar.xz, environment.json, device_check.log)
  local from=${1:-} dest=${DEVICE_CHECK_RESULTS:-results/gpu} report_cmd=${DEVICE_CHECK_REPORT:-nox -s report --}
  local harness=${DEVICE_CHECK_HARNESS:-python3 -m harness}
  [ -n "$from" ] && [ -f "$from/device_check.tar.xz" ] || die "collect DIR: DIR must hold the GPU host's device_check.tar.xz (got '${from}')"
  [ -n "${DEVICE_CHECK_DRY:-}" ] || restore
  local got
  got=$(mktemp -d)
  python3 bench/device_env.py --unpack "$from/device_check.tar.xz" "$got" || die "$from/device_check.tar.xz is damaged; nothing gathered"
  # gather refuses a shard that is unsealed, cut short, damaged or of other artifacts, before writing any
  $harness gather --matrix "$MATRIX" --profile "$PROFILE" --out "$BUILD" "$got/shards" || die "the device's shards were refused (above): nothing published"
  cp "$from/environment.json" "$BUILD/device.json" 2>/dev/null || true
  [ -f "$got/cuda_reference.jsonl" ] && cp "$got/cuda_reference.jsonl" "$BUILD/cuda_reference.jsonl"
  mkdir -p "$BUILD/frontier" && cp "$got"/frontier/*.json "$BUILD/frontier/" 2>/dev/null  # what the device's runtime loads
  local passed="import json, sys; sys.exit(0 if any(json.loads(l).get('status') == 'pass' for l in open(sys.argv[1]) if l.strip()) else 1)"
  if [ -z "${DEVICE_CHECK_DRY:-}" ] && ! python3 -c "$passed" "$BUILD/shards/ortgpu-1.31.1-cuda.jsonl"; then
    die "no CUDA cell passed on the device (see $from/device_check.log): nothing published in $dest"
  fi
  $report_cmd "${MATRIX_ARG[@]}" --profile "$PROFILE" --out "$BUILD" --results "$dest" || die "the report failed (above)"
  cp "$from/environment.json" "$dest/device.json" && cp "$from/device_check.log" "$dest/device_check.log"
  say "published $dest (the machine: $dest/device.json)"
}

dry_run() {  # DIR: the whole check on this CPU machine: the checkout and results/ untouched
  local dir=${1:-}
  [ -n "$dir" ] || die "dry-run DIR: a folder for the build, the package and the call's output"
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
  export DEVICE_CHECK_BUILD=$dir/build-gpu DEVICE_CHECK_PACK=$dir/pack DEVICE_CHECK_DRY=1
  BUILD=$DEVICE_CHECK_BUILD PACK=$DEVICE_CHECK_PACK
  local uv=${UV:-uv}
  if [ ! -f "$PACK/ort-site.tar" ]; then  # the real wheel, which here has no CUDA to load: the columns say so
    mkdir -p "$PACK" "$dir/ort-site"
    $uv pip install -q --no-deps --target "$dir/ort-site" "$ORT_PIN" || die "could not install $ORT_PIN"
    tar -C "$dir/ort-site" -cf "$PACK/ort-site.tar" . && rm -rf "$dir/ort-site"  # not compressed: it never travels
  fi
  export_and_pack
  OUT=$dir/out DEVICE_CHECK_WORK=$dir/device bash "$ROOT/bench/device_check.sh" remote || die "remote failed"
  DEVICE_CHECK_RESULTS=$dir/results/gpu collect "$dir/out"
}

# --- there ---------------------------------------------------------------------------------------------------

step() {  # step SECONDS NAME COMMAND...: under a deadline, TERM to the whole group (workers too), KILL 5 s later
  local limit=$1 name=$2
  shift 2
  [ "$limit" -gt 5 ] || { say "no time left for $name"; return 124; }
  say "$name (at most ${limit}s)"
  timeout -s TERM -k 5 "$limit" "$@"
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && say "$name: cut short after ${limit}s"
  [ $rc -ne 0 ] && say "$name: exit status $rc"
  return $rc
}
left() { echo $((BUDGET - (SECONDS - start) - RESERVE)); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

remote() {
  BUDGET=${DEVICE_CHECK_SECONDS:-360}
  RESERVE=20  # packing $OUT
  local out=${OUT:-$ROOT/build-device-out} work=${DEVICE_CHECK_WORK:-/tmp/device_check}
  HOST_PY=${DEVICE_CHECK_PYTHON:-python3}  # the host's python: torch with CUDA, onnx, numpy
  mkdir -p "$out" "$work"
  exec > >(tee -a "$out/device_check.log") 2>&1
  local tee_pid=$!
  export PYTHONUNBUFFERED=1
  say "budget ${BUDGET}s; packages from $PACK; output $out"
  local ort
  ort=$(ls "$PACK"/ort-site.tar* 2>/dev/null | head -1)
  [ -n "$ort" ] && [ -f "$PACK/export.tar.xz" ] || die "$PACK lacks ort-site.tar.xz or export.tar.xz: run prepare here first, and carry $PACK"
  timeout 60 nvidia-smi || say "nvidia-smi: not here (no NVIDIA driver): every GPU column will say so"
  rm -rf "$work/ort-site" "$work/venv" && mkdir -p "$work/ort-site" "$BUILD"
  "$HOST_PY" bench/device_env.py --unpack "$ort" "$work/ort-site" || die "unpacking onnxruntime-gpu failed"
  "$HOST_PY" bench/device_env.py --unpack "$PACK/export.tar.xz" "$BUILD" || die "unpacking the export failed"
  local py
  py=$("$HOST_PY" bench/device_env.py --site "$work/ort-site" --venv "$work/venv" --facts "$out/environment.json") || die "the run environment could not be made (above)"
  eval "$("$HOST_PY" bench/device_env.py --library-path)"  # torch's CUDA 13 and cuDNN 9 libraries, for every worker
  say "run environment: $py; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  "$HOST_PY" bench/device_env.py --smoke-model "$work/smoke.onnx" && step 90 "smoke test" "$py" bench/device_env.py --smoke "$work/smoke.onnx"
  local run=("$py" -m harness run --matrix "$MATRIX" --profile "$PROFILE" --out "$BUILD")
  step "$(min 200 "$(left)")" "correctness: $ORT_PIN" "${run[@]}" --runtime "$ORT_PIN" --no-latency
  step "$(min 60 "$(left)")" "correctness: $TRT_PIN" "${run[@]}" --runtime "$TRT_PIN" --no-latency
  local torch_device=${DEVICE_CHECK_TORCH_DEVICE:-cuda}
  if timeout 120 "$HOST_PY" -c "import sys, torch; sys.exit(0 if '$torch_device' == 'cpu' or torch.cuda.is_available() else 1)" 2>/dev/null; then
    step "$(min 90 "$(left)")" "cuda_reference (torch on $torch_device)" "$HOST_PY" bench/cuda_reference.py --out "$BUILD" --matrix "$MATRIX" --device "$torch_device"
  else
    say "$HOST_PY has no torch that sees a GPU: no second reference (the report joins none)"
  fi
  step "$(left)" "latency: $ORT_PIN (every cell reused)" "${run[@]}" --runtime "$ORT_PIN"
  "$HOST_PY" bench/device_env.py --pack "$out/device_check.tar.xz" "$BUILD" shards logs cuda_reference.jsonl \
    $(cd "$BUILD" && ls frontier/*.json 2>/dev/null)
  "$HOST_PY" bench/device_env.py --summary "$BUILD/shards"
  say "done in $((SECONDS - start))s: $(ls "$out" | tr '\n' ' ')"
  exec >&- 2>&-
  wait "$tee_pid"
}

case "$MODE" in
  prepare) prepare ;;
  remote) remote ;;
  collect) collect "${2:-}" ;;
  restore) restore ;;
  dry-run) dry_run "${2:-}" ;;
  *) die "usage: bash bench/device_check.sh prepare | remote | collect DIR | restore | dry-run DIR" ;;
esac
