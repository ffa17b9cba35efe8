#!/bin/bash
# PTX interpreter throughput of this tree against an older commit's.
#
#   tests/bench/interp_compare.sh [BASE_COMMIT] [ROUNDS]
#
# BASE_COMMIT (default 785eb67: the interpreter when issue #16 asked for
# ten times its speed) is checked out in a git worktree under
# ${TMPDIR:-/tmp} and only its interp_bench is built there. Both
# interp_bench binaries then run alternately, ROUNDS times (default 5),
# each round 3 repetitions of every benchmark; the best thread_instr/s of
# each side is printed with their ratio (this tree's lockstep scheduler
# against the base). Run it on an otherwise idle machine: on a shared
# 2-core VM single runs vary by 1.5x, which is why it takes the best of
# many and alternates the two.
set -euo pipefail
base=${1:-785eb67}
rounds=${2:-5}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
here_bin=${INTERP_BENCH:-$root/build/tests/bench/interp_bench}
[ -x "$here_bin" ] || { echo "interp_compare: build this tree's interp_bench first (ninja -C build interp_bench), or set INTERP_BENCH" >&2; exit 2; }
wt=${TMPDIR:-/tmp}/phos-interp-base-$(git -C "$root" rev-parse --short "$base")
if [ ! -x "$wt/build/tests/bench/interp_bench" ]; then
  echo "interp_compare: building $base's interp_bench in $wt (a few minutes)" >&2
  [ -d "$wt" ] || git -C "$root" worktree add --detach -f "$wt" "$base" >/dev/null
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C "$wt/build" interp_bench >/dev/null
fi
base_bin=$wt/build/tests/bench/interp_bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= rounds; i++)); do
  echo "interp_compare: round $i/$rounds" >&2
  "$base_bin" --benchmark_min_time=0.2 --benchmark_repetitions=3 2>/dev/null | sed 's/^/base /' >>"$out"
  "$here_bin" --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_filter='lockstep:1' 2>/dev/null |
    sed 's/^/here /' >>"$out"
done
# "<side> BM_Saxpy/workers:1[/lockstep:1]/real_time ... thread_instr/s=440.1M/s"
awk '$NF ~ /^thread_instr/ && $2 !~ /_(mean|median|stddev|cv)$/ {
  side = $1; name = $2; sub(/\/lockstep:1/, "", name); sub(/\/real_time.*/, "", name)
  v = $NF; sub(/thread_instr\/s=/, "", v); unit = substr(v, length(v) - 2); sub(/[kMG]\/s$/, "", v)
  if (unit ~ /^G/) v *= 1000; if (unit ~ /^k/) v /= 1000
  if (v > best[side, name]) best[side, name] = v; names[name] = 1
} END {
  for (n in names) printf "%-28s %14.1f %14.1f %6.1fx\n", n, best["base", n], best["here", n], best["here", n] / best["base", n]
}' "$out" | sort >"$out.table"
printf "%-28s %14s %14s %7s\n" "benchmark" "base M/s" "this M/s" "ratio"
cat "$out.table"
rm -f "$out.table"
