#!/usr/bin/env bash
# Runs the clock suite's hand-over test against mutants of the library:
# each patch here, applied through `go test -overlay` (the working tree is
# never touched), must make it fail by catching overlapping holders.
#
#   integration/testdata/mutants/run.sh [-n RUNS] [-real] [PATCH...]
#
# -n RUNS   runs per mutant (default 1)
# -real     also runs the unpatched code RUNS times, which must pass
# PATCH     the mutants to run (default: every *.patch here)
#
# Exits 0 only when every mutant run failed as expected (and every run of
# the real code passed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
test='^TestClockDrift_fastQuorumFreesKeyOnlyAfterValidity$'
runs=1 real=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -n) runs=$2; shift 2 ;;
    -real) real=1; shift ;;
    -*) echo "usage: $0 [-n RUNS] [-real] [PATCH...]" >&2; exit 2 ;;
    *) break ;;
  esac
done
patches=("$@")
[[ ${#patches[@]} -gt 0 ]] || patches=("$here"/*.patch)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0

# run LABEL OVERLAY: one run of the test; prints its verdict line and the
# test's summary lines, returns the test's exit status.
run() {
  local label=$1 overlay=$2 out=$tmp/out status=0
  (cd "$root/integration" && "${GO:-go}" test -race -count=1 ${overlay:+-overlay "$overlay"} -run "$test" -v .) >"$out" 2>&1 || status=$?
  { grep -E 'hand-overs|cannot' "$out"; grep -E 'early\)' "$out" | head -2; grep -E '^--- ' "$out"; } | sed -E "s/^ +//; s/^/  $label: /"
  if grep -q '\[build failed\]\|setup failed' "$out"; then
    cat "$out" >&2
    return 2
  fi
  return $status
}

if [[ $real == 1 ]]; then
  for ((i = 1; i <= runs; i++)); do
    if run "real #$i" ""; then echo "real code, run $i: passed"
    else echo "real code, run $i: FAILED (it must pass)"; bad=1; fi
  done
fi

for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  target=$(sed -n 's|^+++ b/||p' "$p" | head -1)
  mkdir -p "$tmp/$name"
  patch -s -o "$tmp/$name/$(basename "$target")" "$root/$target" <"$p"
  printf '{"Replace": {"%s": "%s"}}\n' "$root/$target" "$tmp/$name/$(basename "$target")" >"$tmp/$name/overlay.json"
  killed=0
  for ((i = 1; i <= runs; i++)); do
    status=0
    run "$name #$i" "$tmp/$name/overlay.json" || status=$?
    if [[ $status == 2 ]]; then echo "mutant $name: does not build" >&2; exit 2; fi
    if [[ $status != 0 ]] && grep -q 'early)' "$tmp/out"; then
      killed=$((killed + 1))
    fi
  done
  echo "mutant $name: killed in $killed of $runs runs"
  [[ $killed == "$runs" ]] || bad=1
done
exit $bad
