#!/usr/bin/env bash
# Image transfer between phosds vs the loopback TCP bandwidth (issue #19
# item 3; docs/benchmarks.md "Migration transport"): `phos send-image` of
# one image to a phosd on this machine over the data channel (raw TCP beside
# gRPC, docs/migration.md "Data channel") and inside gRPC messages, against
# iperf3's single-stream loopback rate measured in the same run, rounds
# alternating. The destination's checkpoint root is on tmpfs (/dev/shm) so
# the disk is not what is measured; its fsyncs still run.
#
#   tests/bench/transfer_bench.sh [--build DIR] [--mib N] [--rounds N]
#
# Needs iperf3 (Debian's package) and a built phos (ninja -C build phos).
set -euo pipefail

build=build
mib=1024
rounds=3
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--mib N] [--rounds N]" >&2; exit 2 ;;
  esac
done
phos=$build/cli/phos
[[ -x $phos ]] || { echo "transfer_bench.sh: $phos not built (ninja -C $build phos)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "transfer_bench.sh: iperf3 is not installed (apt-get install iperf3)" >&2; exit 1; }

work=$(mktemp -d /dev/shm/phos-transfer-XXXXXX)
daemon_pid=
iperf_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  [[ -n $iperf_pid ]] && kill "$iperf_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== machine"
echo "host: $(uname -srm), nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); git: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')"

umask 077
echo benchtoken >"$work/token"
mkdir -p "$work/src/img" "$work/root"
head -c "${mib}M" /dev/urandom >"$work/src/img/gpu.img"
"$phos" daemon --backend sim --pool 0 --cow-reserve 0 --socket "$work/d.sock" --checkpoint-root "$work/root" \
  --listen 127.0.0.1:0 --peer-token "$work/token" >"$work/d.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do grep -q "(port " "$work/d.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on 127\.0\.0\.1:0 (port \([0-9]*\)).*/\1/p' "$work/d.log" | head -1)
[[ -n $port ]] || { cat "$work/d.log" >&2; exit 1; }
iperf3 -s -p 5399 >/dev/null 2>&1 &
iperf_pid=$!
sleep 0.5

send() {  # transport name -> MB/s
  local out
  out=$("$phos" send-image "$work/src/img" --to "127.0.0.1:$port" --peer-token "$work/token" --name "$2" \
    --transport "$1" 2>&1 >/dev/null | tail -1)
  rm -rf "$work/root/incoming/$2"
  sed -n 's/.*, \([0-9]*\) MB\/s (.*/\1/p' <<<"$out"
}

echo "== $mib MiB image, $rounds rounds (MB/s; iperf3: one TCP stream, 3 s, loopback)"
printf '%-6s %10s %14s %10s %12s %12s\n' round iperf3 data_channel grpc data/iperf grpc/iperf
for r in $(seq "$rounds"); do
  ip=$(iperf3 -c 127.0.0.1 -p 5399 -t 3 -J | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))')
  d=$(send data "r$r-data")
  g=$(send grpc "r$r-grpc")
  awk -v r="$r" -v ip="$ip" -v d="$d" -v g="$g" 'BEGIN { printf "%-6s %10d %14d %10d %11.0f%% %11.0f%%\n", r, ip, d, g, 100 * d / ip, 100 * g / ip }'
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
