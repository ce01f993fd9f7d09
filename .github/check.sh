#!/usr/bin/env bash
# The `Check` step of action.yml: `harness check` on the caller's file, run from the caller's workspace.
# Reads TARGET, ARGS, RUNTIMES, PROFILE, BASELINE, ANSWER (the action's inputs) and HARNESS (this checkout); writes
# the screen to stdout and to the job summary, the JSON answer to ANSWER, and `exit` and `answer` to GITHUB_OUTPUT.
# Exits with harness check's status: 0 pass (or no regression), 1 fail, 2 bad input.
set -uo pipefail
: "${TARGET:?the target input is empty: give the .onnx file or pkg.module:factory}"
: "${HARNESS:?HARNESS must be this checkout}"
workspace="${GITHUB_WORKSPACE:-$PWD}"
answer="${ANSWER:-harness-check.json}"
out="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/harness-check"
# The check's own environment (onnx, numpy, the harness; torch too for a module spec), made once by nox and cached.
(cd "$HARNESS" && nox -s check --install-only -- "$TARGET") >&2 || { echo "harness check: its environment could not be made" >&2; exit 2; }
args=(check "$TARGET" --profile "${PROFILE:-default}" --out "$out" --matrix "$HARNESS/matrix.toml"
      --results "$HARNESS/results" --envs "$HARNESS/build/check/envs")
for runtime in ${RUNTIMES:-}; do args+=(--runtime "$runtime"); done
[ -n "${BASELINE:-}" ] && args+=(--baseline "$BASELINE")
read -r -a extra <<< "${ARGS:-}"
args+=("${extra[@]}")
cd "$workspace" || exit 2
"$HARNESS/.nox/check/bin/harness" "${args[@]}" | tee "$out.screen.txt"
status=${PIPESTATUS[0]}
if [ -f "$out/check.json" ]; then cp "$out/check.json" "$answer"; fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  { echo '### harness check'; echo; cat "$out.screen.txt"; } >> "$GITHUB_STEP_SUMMARY"
fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  { echo "exit=$status"; echo "answer=$answer"; } >> "$GITHUB_OUTPUT"
fi
exit "$status"
