#!/usr/bin/env bash
# C/R engine: application stall of stop / cow / recopy checkpoints and time
# to first kernel of stop-the-world vs concurrent restores
# (tests/bench/engine_stall_bench.cc; docs/benchmarks.md "C/R engine: stall
# and restore"). Builds nothing: build the program first
# (`ninja -C build engine_stall_bench`).
#
#   tests/bench/engine_stall_bench.sh [--build DIR] [PROGRAM FLAGS...]
#
# Defaults: 64 x 64 MiB = 4 GiB of buffers, sim link 25 GB/s (phosd
# --sim-link-gbps 25), images under /var/tmp, --cow-reserve 2 GiB (filled
# before the checkpoints, as phosd does at start; cow-alloc: without it). The sim
# keeps device memory in host RAM: peak host memory is about 2x the buffers
# (shadows for cow, staging for recopy) plus the page cache of the images;
# ~90 s on the 2-core development VM. PROGRAM FLAGS are appended (a default
# they give is left out), e.g. --json FILE, --modes stop,cow, --hot-buffers 8.
set -euo pipefail

build=build
extra=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
bin=$build/tests/bench/engine_stall_bench
[[ -x $bin ]] || { echo "engine_stall_bench.sh: $bin not built (ninja -C $build engine_stall_bench)" >&2; exit 1; }

dir=/var/tmp
for ((i = 0; i < ${#extra[@]}; i++)); do
  [[ ${extra[i]} == --dir ]] && dir=${extra[i + 1]:-$dir}
done

echo "== machine"
echo "host: $(uname -srm), nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
free -m | awk 'NR == 2 { printf "memory: %d MiB total, %d MiB available\n", $2, $7 }'
df -h --output=source,fstype,size,avail "$dir" | tail -1 | awk -v d="$dir" '{ printf "disk (%s): %s %s, %s total, %s free\n", d, $1, $2, $3, $4 }'
echo "git: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$(dirname "$0")" diff --quiet HEAD -- daemon 2>/dev/null || echo ' (daemon/ modified)')"

# Defaults, each left out when PROGRAM FLAGS give it (list flags such as
# --modes would otherwise add up).
cmd=("$bin")
defaults=(--buffers 64 --buffer-mib 64 --link-gbps 25 --dir "$dir" --modes stop,cow,cow-alloc,recopy --cow-reserve-mib 2048)
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
  [[ " ${extra[*]} " == *" ${defaults[i]} "* ]] || cmd+=("${defaults[i]}" "${defaults[i + 1]}")
done
cmd+=("${extra[@]}")
# fio's sequential O_DIRECT read of the restores' own gpu.img, right after
# each round of restores, is the baseline of the stop restore's read rate
# (docs/benchmarks.md; issue #19: >= 90 %).
if command -v fio >/dev/null; then
  cmd+=(--fio true)
fi
echo "== ${cmd[*]}"
"${cmd[@]}"
