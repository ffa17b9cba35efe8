#!/usr/bin/env bash
# Job checkpoints (docs/protocols.md "Job checkpoints"; docs/benchmarks.md
# "Job checkpoints"): the stall the ranks of an NCCL job feel when the job
# is checkpointed at one cut, `--mode cow` (ours: each rank runs on once its
# capture point passed, buffers copied behind it) against `--mode stop` (the
# stop-the-world baseline: every rank held until its whole state is
# copied), for 2 and 4 ranks on one phosd (sim, 4 GPUs). Each rank runs
# nccl_ranks' `train` loop with BALLAST_MB MiB of extra device state. Prints
# one line per run and a table; whole-process images (CRIU: root).
#
#   tests/bench/job_checkpoint_bench.sh [BUILD_DIR] [BALLAST_MB] [REPS]
#
# Defaults: build, 512 MiB per rank, 3 repetitions (the median is kept).
# Builds nothing: `ninja -C build phosd phos phos_client phos_integration_programs`.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
ballast=${2:-512}
reps=${3:-3}
phos=$build/cli/phos
phosd=$build/daemon/phosd
lib=$build/interposer/client/libphos.so
app=$build/tests/integration/nccl_ranks
for f in "$phos" "$phosd" "$lib" "$app"; do
  [[ -e $f ]] || { echo "job_checkpoint_bench.sh: $f not built" >&2; exit 1; }
done
work=$(mktemp -d /var/tmp/phos-jobbench.XXXXXX)
sock=$work/phosd.sock
daemon_pid=
cleanup() {
  pkill -9 -f "$app train" 2>/dev/null || true
  [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$phosd" --backend sim --sim-gpus 4 --socket "$sock" >"$work/phosd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [[ -S $sock.data ]] && break; sleep 0.1; done

# One job of $1 ranks checkpointed in mode $2: prints "stall_us cut_us".
one_run() {
  local n=$1 mode=$2 id=$work/id.$RANDOM
  local pids=()
  rm -f "$work"/rank*.log  # the wait below must not read the last run's log
  for ((r = 0; r < n; r++)); do
    NCCL_RANKS_BALLAST_MB=$ballast setsid "$phos" --socket "$sock" run --lib "$lib" -- "$app" train "$r" "$n" "$id" \
      >"$work/rank$r.log" 2>&1 </dev/null &
    pids+=($!)
  done
  until grep -q "rank $((n - 1)): step 20" "$work/rank$((n - 1)).log" 2>/dev/null; do sleep 0.05; done
  local out
  out=$("$phos" --socket "$sock" checkpoint "${pids[0]}" --job --mode "$mode" --out "$work/img" --json)
  kill -9 "${pids[@]}" 2>/dev/null || true
  pkill -9 -f "$app train" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work/img" "$id"
  python3 - "$out" <<'PY'
import json, sys
done = [json.loads(l)["done"] for l in sys.argv[1].splitlines() if '"done"' in l][0]
print(int(done.get("stallUs", done.get("stall_us", 0))), int(done.get("counters", {}).get("cut_us", 0)))
PY
}

declare -A stall cut
for n in 2 4; do
  for mode in stop cow; do
    s=(); c=()
    for ((i = 0; i < reps; i++)); do
      read -r st ct < <(one_run "$n" "$mode")
      echo "ranks=$n mode=$mode stall_us=$st cut_us=$ct"
      s+=("$st"); c+=("$ct")
    done
    stall[$n,$mode]=$(printf '%s\n' "${s[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p")
    cut[$n,$mode]=$(printf '%s\n' "${c[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p")
  done
done
echo
echo "| ranks | stop: stall (ms) | cow: stall (ms) | stop / cow | cut (ms, stop / cow) |"
echo "|---|---|---|---|---|"
for n in 2 4; do
  python3 -c "
s, c = ${stall[$n,stop]}, ${stall[$n,cow]}
print(f'| $n | {s/1000:.1f} | {c/1000:.1f} | {s/max(c,1):.1f}x | {${cut[$n,stop]}/1000:.1f} / {${cut[$n,cow]}/1000:.1f} |')"
done
