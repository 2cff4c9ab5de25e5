#!/usr/bin/env bash
# Runs the simulator against each mutant (a patch of this directory,
# applied to a temporary copy of the repository): each must fail within
# BUDGET, on random seeds, naming the seed. Usage: run.sh [mutant ...]
# A mutant is m.patch; m.*.diff are versions of it for other versions of
# the library's code (the first that applies is used); m.flags, if there,
# holds more flags for the simulator (one line), for a mutant only some
# workloads reach.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
budget=${BUDGET:-60s}
hang=${HANG:-5m} # the test binary's -test.timeout
ops=${OPS:-5000}
shrink=${SHRINK:-20s} # shrinking the failure, after it was found
go=${GO:-go}
mutants=("$@")
if [ ${#mutants[@]} -eq 0 ]; then
	for p in "$here"/*.patch; do mutants+=("$(basename "$p" .patch)"); done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
survived=0
for m in "${mutants[@]}"; do
	copy="$work/$m"
	mkdir -p "$copy"
	(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$copy")
	# $m.patch, or where the library's code has changed under it, one
	# of its other versions ($m.*.diff) that applies.
	applied=
	for p in "$here/$m.patch" "$here/$m".*.diff; do
		[ -f "$p" ] || continue
		if patch -s --dry-run -d "$copy" -p1 < "$p" >/dev/null 2>&1; then
			patch -s -d "$copy" -p1 < "$p" && applied=$p && break
		fi
	done
	if [ -z "$applied" ]; then
		echo "mutant $m: no version of the patch applies"; survived=$((survived+1)); continue
	fi
	if ! (cd "$copy/sim" && GOFLAGS=-mod=mod $go test -c -o "$copy/sim.test" . >"$copy/build.log" 2>&1); then
		echo "mutant $m: does not build:"; cat "$copy/build.log"; survived=$((survived+1)); continue
	fi
	flags=()
	if [ -f "$here/$m.flags" ]; then read -ra flags < "$here/$m.flags"; fi
	start=$(date +%s.%N)
	# A run that hangs (no violation, no deadlock the bubble can see)
	# ends by the test's own timeout, printing every goroutine: not a kill.
	(cd "$copy/sim" && GOGC=400 "$copy/sim.test" -test.run '^TestSim_noTwoValidHolders$' -test.v \
		-test.timeout "$hang" -ops "$ops" -duration "$budget" -shrink "$shrink" "${flags[@]}" >"$copy/run.log" 2>&1)
	rc=$?
	took=$(echo "$(date +%s.%N) - $start" | bc)
	# The time to the violation, not counting the shrinking after it.
	found=$(grep -o 'failed [0-9.]*s after the test began' "$copy/run.log" | head -1 | cut -d' ' -f2 | tr -d s)
	[ -n "$found" ] && took=$found
	if [ $rc -ne 0 ] && grep -q 'replay: make sim SEED=' "$copy/run.log"; then
		seed=$(grep -o 'sim: seed [0-9]*' "$copy/run.log" | head -1 | cut -d' ' -f3)
		what=$(grep -o 'sim: seed [0-9]*: at [^:]*: .*' "$copy/run.log" | head -1 | cut -c1-160)
		printf 'mutant %s: KILLED in %.1fs (seed %s): %s\n' "$m" "$took" "$seed" "$what"
		grep -A40 '^ *shrunk (' "$copy/run.log" | sed -n '1,/^ *$/p' | sed 's/^ */    /' | head -30
	elif [ $rc -ne 0 ] && grep -q 'deadlock' "$copy/run.log"; then
		seeds=$(grep -o 'sim: running seed [0-9]*' "$copy/run.log" | tail -"$(nproc)" | cut -d' ' -f4 | tr '\n' ' ')
		printf 'mutant %s: KILLED in %.1fs (one of the seeds %s): %s\n' "$m" "$took" "$seeds" "$(grep -m1 -o 'deadlock.*' "$copy/run.log" | cut -c1-120)"
	elif [ $rc -ne 0 ]; then
		printf 'mutant %s: the run failed without a violation (%.1fs):\n' "$m" "$took"; tail -20 "$copy/run.log"
		survived=$((survived+1))
	else
		printf 'mutant %s: SURVIVED %s (%s)\n' "$m" "$budget" "$(grep -o '[0-9]* simulations, [0-9]* lock operations' "$copy/run.log")"
		survived=$((survived+1))
	fi
done
[ $survived -eq 0 ]
