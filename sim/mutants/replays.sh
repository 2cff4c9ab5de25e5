#!/usr/bin/env bash
# Measures how often `make sim SEED=...` finds a mutant's failure again:
# builds the mutant (as run.sh does), finds SEEDS (2) failing seeds on new
# seeds (2 lanes, FIND per search), or takes the seeds given, then runs the
# replay as `make sim SEED=...` does (REPLAYS runs at most, no shrinking)
# N (10) times per seed. Per seed it prints how many invocations failed
# the same way (the same words of the violation), the run of each that
# failed (0: none), how many single runs failed in all, and how many
# invocations failed on the same key at the same virtual instant.
# Usage: replays.sh mutant [seed ...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
m=$1; shift
n=${N:-10}; replays=${REPLAYS:-10}; want=${SEEDS:-$(($# > 0 ? $# : 2))}; ops=${OPS:-5000}; find=${FIND:-120s}; go=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work")
for p in "$here/$m.patch" "$here/$m".*.diff; do
	[ -f "$p" ] || continue
	if patch -s --dry-run -d "$work" -p1 < "$p" >/dev/null 2>&1; then patch -s -d "$work" -p1 < "$p"; break; fi
done
(cd "$work/sim" && GOFLAGS=-mod=mod $go test -c -o "$work/sim.test" .) || exit 1
flags=()
if [ -f "$here/$m.flags" ]; then read -ra flags < "$here/$m.flags"; fi
sim() { (cd "$work/sim" && GOGC=400 "$work/sim.test" -test.run '^TestSim_noTwoValidHolders$' -test.v -test.timeout 2h -ops "$ops" -shrink 0 "${flags[@]}" "$@"); }
what() { grep -o 'sim: seed [0-9]*: at [^:]*: key .*' | head -1; }
where() { sed -E 's/^(sim: seed [0-9]+: at [^:]*: key [^ ]*): .*/\1/'; }
class() { sed -E 's/^sim: seed [0-9]+: at [^:]*: key [^ ]*: //' | tr -s ' ' '\n' | grep -v '[0-9/()"]' | head -4 | tr '\n' ' '; }
seeds=("$@"); found=()
while [ ${#seeds[@]} -lt "$want" ]; do
	v=$(sim -duration "$find" 2>&1 | what)
	[ -z "$v" ] && { echo "$m: no failure in $find"; continue; }
	echo "$m: $v" | cut -c1-160
	seeds+=("$(echo "$v" | cut -d' ' -f3 | tr -d :)"); found+=("$v")
done
for i in "${!seeds[@]}"; do
	s=${seeds[$i]}; first=${found[$i]:-}
	runs=() same=0 fails=0 exact=0
	for _ in $(seq "$n"); do
		log=$(sim -seed "$s" -replays "$replays" 2>&1)
		v=$(echo "$log" | what)
		k=0
		if [ -n "$v" ]; then
			k=$(echo "$log" | grep -c '^=== RUN.*replay')
			fails=$((fails+1))
			if [ -z "$first" ] || [ "$(echo "$v" | class)" = "$(echo "$first" | class)" ]; then same=$((same+1)); fi
			[ -n "$first" ] && [ "$(echo "$v" | where)" = "$(echo "$first" | where)" ] && exact=$((exact+1))
		fi
		runs+=("$k")
	done
	total=0
	for k in "${runs[@]}"; do if [ "$k" -gt 0 ]; then total=$((total+k)); else total=$((total+replays)); fi; done
	racing=$(echo "$log" | grep -q 'racing' && echo ", racing" || true)
	echo "$m seed $s$racing: $same/$n invocations failed the same way (runs: ${runs[*]}); $fails of $total single runs failed; $exact on the same key at the same instant"
done
