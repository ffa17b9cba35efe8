#!/usr/bin/env bash
# Job checkpoints across phosds (docs/protocols.md "Jobs across phosds";
# docs/benchmarks.md "Job checkpoints across phosds"): the time the cut
# takes to agree and the stall the ranks feel when a 4-rank NCCL job is
# checkpointed (`--mode cow`) with its ranks on two phosds coordinated
# through etcd (2 + 2; the barrier in etcd), against the same job on one
# phosd (4 + 0; the cut inside phosd). A local etcd on loopback; sim; each
# rank runs nccl_ranks' `train` with BALLAST_MB MiB of extra device state.
# Whole-process images (CRIU: root).
#
#   tests/bench/job_across_bench.sh [BUILD_DIR] [BALLAST_MB] [REPS]
#
# Defaults: build, 64 MiB per rank, 3 repetitions (the median is kept).
# Builds nothing: `ninja -C build phosd phos phos_client phos_integration_programs`.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
ballast=${2:-64}
reps=${3:-3}
phos=$build/cli/phos
phosd=$build/daemon/phosd
lib=$build/interposer/client/libphos.so
app=$build/tests/integration/nccl_ranks
for f in "$phos" "$phosd" "$lib" "$app" /usr/bin/etcd; do
  [[ -e $f ]] || { echo "job_across_bench.sh: $f missing" >&2; exit 1; }
done
work=$(mktemp -d /var/tmp/phos-jobx-bench.XXXXXX)
pids_to_kill=()
cleanup() {
  pkill -9 -f "$app train" 2>/dev/null || true
  for p in "${pids_to_kill[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cport=$(port); pport=$(port)
/usr/bin/etcd --name bench --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$cport" \
  --advertise-client-urls "http://127.0.0.1:$cport" --listen-peer-urls "http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pport" --initial-cluster "bench=http://127.0.0.1:$pport" \
  >"$work/etcd.log" 2>&1 &
pids_to_kill+=($!)
echo bench-token >"$work/token"; chmod 600 "$work/token"
for d in a b; do
  mkdir -p "$work/$d"
  for _ in $(seq 100); do "$phosd" --backend sim --sim-gpus 2 --socket "$work/$d/s.sock" --template-cache off \
      --listen 127.0.0.1:0 --peer-token "$work/token" --etcd "127.0.0.1:$cport" >"$work/$d.log" 2>&1 &
    pid=$!; sleep 0.5
    if kill -0 "$pid" 2>/dev/null; then pids_to_kill+=("$pid"); break; fi  # etcd not up yet: again
  done
  for _ in $(seq 100); do [[ -S $work/$d/s.sock.data ]] && break; sleep 0.1; done
done

# A 4-rank job, ranks 0..split-1 on A, the rest on B: prints "stall_us cut_us".
one_run() {
  local split=$1 id=$work/id.$RANDOM
  local pids=()
  rm -f "$work"/rank*.log
  for ((r = 0; r < 4; r++)); do
    local d=a; ((r >= split)) && d=b
    NCCL_RANKS_BALLAST_MB=$ballast setsid "$phos" --socket "$work/$d/s.sock" run --lib "$lib" -- "$app" train "$r" 4 "$id" \
      >"$work/rank$r.log" 2>&1 </dev/null &
    pids+=($!)
  done
  until grep -q "rank 3: step 20" "$work/rank3.log" 2>/dev/null; do sleep 0.05; done
  local out
  out=$("$phos" --socket "$work/a/s.sock" checkpoint "${pids[0]}" --job --mode cow --out "$work/img" --json)
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
for split in 4 2; do
  s=(); c=()
  for ((i = 0; i < reps; i++)); do
    read -r st ct < <(one_run "$split")
    echo "split=$split stall_us=$st cut_us=$ct"
    s+=("$st"); c+=("$ct")
  done
  stall[$split]=$(printf '%s\n' "${s[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p")
  cut[$split]=$(printf '%s\n' "${c[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p")
done
echo
echo "| 4 ranks | cut (ms) | stall (ms) |"
echo "|---|---|---|"
python3 -c "print('| one phosd (4 + 0) | %.1f | %.1f |' % (${cut[4]}/1000, ${stall[4]}/1000))"
python3 -c "print('| two phosds through etcd (2 + 2) | %.1f | %.1f |' % (${cut[2]}/1000, ${stall[2]}/1000))"
