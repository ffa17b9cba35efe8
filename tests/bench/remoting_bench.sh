#!/usr/bin/env bash
# Runs tests/bench/remoting_bench under `phos run` against a private phosd.
#
#   tests/bench/remoting_bench.sh [BUILD_DIR] [LAUNCHES] [MIB] [BACKEND]
#
# Defaults: build, 20000 launches, 256 MiB copies, the sim backend. The
# daemon and its socket live in a temporary directory removed on exit.
set -euo pipefail
build=${1:-build}
launches=${2:-20000}
mib=${3:-256}
backend=${4:-sim}
phos="$build/cli/phos"
lib="$build/interposer/client/libphos.so"
prog="$build/tests/bench/remoting_bench"
for f in "$phos" "$lib" "$prog"; do
  [[ -e $f ]] || { echo "remoting_bench.sh: $f is missing; build with -DPHOS_BUILD_BENCHMARKS=ON first" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/phos-bench-XXXXXX)
daemon_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
"$phos" daemon --backend "$backend" --socket "$dir/phosd.sock" --log-level warn >"$dir/phosd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  [[ -S $dir/phosd.sock.data ]] && break
  sleep 0.1
done
[[ -S $dir/phosd.sock.data ]] || { echo "remoting_bench.sh: phosd did not start:" >&2; cat "$dir/phosd.log" >&2; exit 2; }
"$phos" --socket "$dir/phosd.sock" run --lib "$lib" -- "$prog" "$launches" "$mib"
