#!/usr/bin/env bash
# Runs the tests of one package in SHARDS processes at once, each with a
# share of its top-level tests (Test*, Example*, Fuzz* seeds), round-robin
# in name order, from one test binary built once. For a package whose
# tests mostly wait (TTLs, frozen masters, retries): each process still
# runs its tests one after the other, so a test that counts goroutines or
# memory, or bounds a duration, sees only its own process; the processes
# share the CPUs. Each shard's output is printed, whole, when it ends.
# Tests whose names match ALONE (a regexp: tests that load the CPUs on
# purpose) run after the shards, in one process, with nothing of this
# package beside them.
#
# Usage: [ALONE=regexp] testshards.sh SHARDS PKGDIR [test binary flags ...]
#   e.g. ALONE='UnderLoad$' testshards.sh 2 redlock -test.timeout=20m
set -uo pipefail
shards=$1 dir=$2
shift 2
go=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$dir" || exit 1
if ! $go test -race -c -o "$work/pkg.test" . >"$work/build.log" 2>&1; then
	cat "$work/build.log"
	echo "FAIL	$dir [build failed]"
	exit 1
fi
[ -x "$work/pkg.test" ] || { echo "ok	$dir [no test files]"; exit 0; }
"$work/pkg.test" -test.list '.*' | grep -E '^(Test|Example|Fuzz)' | sort >"$work/all" || true
alone=${ALONE:-}
if [ -n "$alone" ]; then
	grep -Ev "$alone" "$work/all" >"$work/list"
	grep -E "$alone" "$work/all" | paste -sd'|' >"$work/alone"
else
	cp "$work/all" "$work/list"
	: >"$work/alone"
fi
start=$(date +%s)
pids=()
for ((i = 0; i < shards; i++)); do
	names=$(awk -v n="$shards" -v i="$i" 'NR % n == i' "$work/list" | paste -sd'|')
	[ -n "$names" ] || continue
	(
		s=$(date +%s)
		"$work/pkg.test" -test.run "^(${names})\$" -test.count=1 "$@" >"$work/out.$i" 2>&1
		rc=$?
		echo "shard $((i + 1))/$shards of $dir: exit $rc after $(($(date +%s) - s)) s" >>"$work/out.$i"
		exit $rc
	) &
	pids+=("$!:$i")
done
fail=0
for p in "${pids[@]}"; do
	if ! wait "${p%%:*}"; then fail=1; fi
	cat "$work/out.${p##*:}"
done
if [ -s "$work/alone" ]; then
	s=$(date +%s)
	"$work/pkg.test" -test.run "^($(cat "$work/alone"))\$" -test.count=1 "$@" || fail=1
	echo "alone in $dir ($(cat "$work/alone")): $(($(date +%s) - s)) s"
fi
if [ $fail -ne 0 ]; then
	echo "FAIL	$dir	$(($(date +%s) - start))s ($shards shards)"
	exit 1
fi
echo "ok	$dir	$(($(date +%s) - start))s ($shards shards)"
