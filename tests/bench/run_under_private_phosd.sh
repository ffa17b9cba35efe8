#!/usr/bin/env bash
# Runs one CUDA program under `phos run` against a private phosd (the
# remoting and cuBLAS benchmarks share it):
#
#   tests/bench/run_under_private_phosd.sh BUILD_DIR BACKEND PROGRAM [ARGS...]
#
# The daemon and its socket live in a temporary directory removed on exit.
set -euo pipefail
build=$1
backend=$2
prog=$3
shift 3
phos="$build/cli/phos"
lib="$build/interposer/client/libphos.so"
name=$(basename "$prog")
for f in "$phos" "$lib" "$prog"; do
  [[ -e $f ]] || { echo "$name: $f is missing; build with -DPHOS_BUILD_BENCHMARKS=ON first" >&2; exit 2; }
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
[[ -S $dir/phosd.sock.data ]] || { echo "$name: phosd did not start:" >&2; cat "$dir/phosd.log" >&2; exit 2; }
"$phos" --socket "$dir/phosd.sock" run --lib "$lib" -- "$prog" "$@"
