#!/usr/bin/env bash
# Image transfer between phosds vs the loopback TCP bandwidth (issue #19
# item 3; docs/benchmarks.md "Data channel vs gRPC vs iperf3"): `phos
# send-image` of one image to a phosd on this machine over the data channel
# (raw TCP beside gRPC, docs/migration.md "Data channel") and inside gRPC
# messages, and a live migration's pre-copy stream (precopy_stream_bench:
# buffer copies from memory, over the data channel), against iperf3's
# single-stream loopback rate measured in the same run, rounds alternating.
# iperf3 -F (the same file read by the client and written by the server,
# no checks) is measured beside it: what moving a file, not memory, costs
# here. The destination's checkpoint root is on tmpfs (/dev/shm) so the
# disk is not what is measured; its fsyncs still run.
#
#   tests/bench/transfer_bench.sh [--build DIR] [--mib N] [--rounds N]
#
# Needs iperf3 (Debian's package) and a built phos and bench program
# (ninja -C build phos precopy_stream_bench).
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
precopy_bench=$build/tests/bench/precopy_stream_bench
[[ -x $phos && -x $precopy_bench ]] || {
  echo "transfer_bench.sh: $phos or $precopy_bench not built (ninja -C $build phos precopy_stream_bench)" >&2
  exit 1
}
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

iperf_rate() {  # iperf3 -J on stdin -> MB/s received
  python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))'
}
iperf_file() {  # the image file through iperf3 -F, to a file on the same tmpfs -> MB/s
  timeout 120 iperf3 -s -1 -p 5398 -F "$work/iperf-dst" >/dev/null 2>&1 &
  local server=$! rate
  sleep 0.5
  rate=$(timeout 120 iperf3 -c 127.0.0.1 -p 5398 -F "$work/src/img/gpu.img" -J | iperf_rate)
  wait "$server" 2>/dev/null || true
  rm -f "$work/iperf-dst"
  echo "$rate"
}
dd_write() {  # a new file of the image's size written on the same tmpfs from /dev/zero -> MB/s
  local out
  out=$(dd if=/dev/zero of="$work/dd-dst" bs=2M count=$((mib / 2)) conv=fsync 2>&1 | tail -1)
  rm -f "$work/dd-dst"
  awk -v b="${out%% bytes*}" -v s="$(sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' <<<"$out")" 'BEGIN { printf "%d\n", b / 1e6 / s }'
}
precopy() {  # name -> MB/s
  "$precopy_bench" --to "127.0.0.1:$port" --peer-token "$work/token" --mib "$mib" --name "$1" |
    sed -n 's/.*, \([0-9]*\) MB\/s (.*/\1/p'
}

echo "== $mib MiB image, $rounds rounds (MB/s; iperf3: one TCP stream, 3 s, loopback; iperf3 -F: the image file;"
echo "   dd: /dev/zero into a new file on the destination's tmpfs, no network)"
printf '%-6s %7s %10s %6s %13s %9s %7s %11s %15s %11s %8s\n' round iperf3 iperf3_-F dd data_channel pre-copy grpc \
  data/iperf pre-copy/iperf data/iperf-F data/dd
for r in $(seq "$rounds"); do
  ip=$(iperf3 -c 127.0.0.1 -p 5399 -t 3 -J | iperf_rate)
  ipf=$(iperf_file)
  w=$(dd_write)
  d=$(send data "r$r-data")
  p=$(precopy "r$r-precopy")
  g=$(send grpc "r$r-grpc")
  awk -v r="$r" -v ip="$ip" -v ipf="$ipf" -v w="$w" -v d="$d" -v p="$p" -v g="$g" 'BEGIN {
    printf "%-6s %7d %10d %6d %13d %9d %7d %10.0f%% %14.0f%% %10.0f%% %7.0f%%\n", r, ip, ipf, w, d, p, g,
      100 * d / ip, 100 * p / ip, 100 * d / ipf, 100 * d / w }'
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
