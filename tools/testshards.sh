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
# package beside them. ALONE_RUN=skip leaves them out (the caller runs
# them later, when nothing else runs: make test); ALONE_RUN=only runs
# them and no shard.
#
# Usage: [ALONE=regexp [ALONE_RUN=skip|only]] testshards.sh SHARDS PKGDIR [test binary flags ...]
#   e.g. ALONE='UnderLoad$' testshards.sh 2 redlock -test.timeout=20m
set -uo pipefail
shards=$1 dir=$2
shift 2
go=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$(pwd)
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
alone_run=${ALONE_RUN:-after}
case $alone_run in
after | skip) ;;
only) : >"$work/list" ;; # no shard
*) echo "testshards.sh: ALONE_RUN must be after, skip or only, not $alone_run"; exit 2 ;;
esac
# what the run covered, for its last line
what() {
	case $alone_run in
	after) echo "$shards shards" ;;
	skip) echo "$shards shards; the tests run alone left for later" ;;
	only) echo "the tests run alone" ;;
	esac
}
start=$(date +%s)
pids=()
# Shares by measured duration when the package has a durations file
# (tools/testdurations/<package>.txt, "TestName seconds" per line; `make
# test-durations` writes it): longest first, each test to the share with
# the least time so far; a test the file does not name counts as the
# median. Without the file, round-robin in name order.
durations=$root/tools/testdurations/$(basename "$dir").txt
if [ -s "$durations" ]; then
	median=$(awk '{ print $2 }' "$durations" | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 1 }')
	awk -v med="$median" '
		FNR == NR { d[$1] = $2; next }
		{ print $1, ($1 in d ? d[$1] : med) }' "$durations" "$work/list" |
		sort -k2,2gr -k1,1 | awk -v n="$shards" '
		{
			best = 0
			for (i = 1; i < n; i++) if (load[i] + 0 < load[best] + 0) best = i
			load[best] += $2
			print best, $1
		}' >"$work/assigned"
else
	awk -v n="$shards" '{ print NR % n, $1 }' "$work/list" >"$work/assigned"
fi
for ((i = 0; i < shards; i++)); do
	names=$(awk -v i="$i" '$1 == i { print $2 }' "$work/assigned" | paste -sd'|')
	[ -n "$names" ] || continue
	(
		s=$(date +%s)
		"$work/pkg.test" -test.run "^(${names})\$" -test.count=1 ${DURATIONS_OUT:+-test.v} "$@" >"$work/out.$i" 2>&1
		rc=$?
		echo "shard $((i + 1))/$shards of $dir: exit $rc after $(($(date +%s) - s)) s" >>"$work/out.$i"
		exit $rc
	) &
	pids+=("$!:$i")
done
fail=0
for p in "${pids[@]}"; do
	if ! wait "${p%%:*}"; then fail=1; fi
	if [ -n "${DURATIONS_OUT:-}" ]; then
		grep -Ev '^(=== (RUN|PAUSE|CONT|NAME)|[[:space:]]*--- PASS)' "$work/out.${p##*:}"
	else
		cat "$work/out.${p##*:}"
	fi
done
if [ -n "${DURATIONS_OUT:-}" ]; then
	# Top-level tests only (a subtest's line is indented), to 0.1 s.
	sed -nE 's/^--- (PASS|FAIL|SKIP): ([^ ]+) \(([0-9.]+)s\)$/\2 \3/p' "$work"/out.* |
		awk '{ printf "%s %.1f\n", $1, $2 }' | sort >"$DURATIONS_OUT"
	echo "durations of $(wc -l <"$DURATIONS_OUT") tests written to $DURATIONS_OUT"
fi
if [ -n "$(cat "$work/alone")" ] && [ "$alone_run" != skip ]; then
	s=$(date +%s)
	"$work/pkg.test" -test.run "^($(cat "$work/alone"))\$" -test.count=1 "$@" || fail=1
	echo "alone in $dir ($(cat "$work/alone")): $(($(date +%s) - s)) s"
fi
if [ $fail -ne 0 ]; then
	echo "FAIL	$dir	$(($(date +%s) - start))s ($(what))"
	exit 1
fi
echo "ok	$dir	$(($(date +%s) - start))s ($(what))"
