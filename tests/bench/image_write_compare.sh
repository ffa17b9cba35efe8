#!/usr/bin/env bash
# Image write throughput: phos's ImageWriter (io_uring + O_DIRECT) against
# fio and dd writing the same number of bytes with O_DIRECT into the same
# directory, and against a file-per-buffer open/write/fsync writer
# (tests/bench/image_write_compare). docs/benchmarks.md "Image write
# throughput vs fio/dd and file-per-buffer".
#
#   tests/bench/image_write_compare.sh [--build DIR] [--dir DIR] [--rounds N]
#                                      [--settle SECONDS] [--json FILE] [PROGRAM FLAGS...]
#
# PROGRAM FLAGS go to image_write_compare (--total-mib, --min-kib, --max-mib,
# --seed, --chunk-kib, --queue-depth, --threads); fio and dd use the same
# total, block size (the chunk) and queue depth (fio). Defaults: build,
# /var/tmp/phos-image-compare, 3 rounds, 4 GiB of buffers of 1 KiB..64 MiB
# (~90 s on the 2-core development VM).
#
# Each round runs dd, fio and phos + the baseline once (the order flips every
# round; before each run `sync` and --settle seconds, default 2, so a run
# does not meet the writeback of the one before); the ratios are per round,
# then the median. Every number is bytes
# over the time to durability as the tool itself measures it — fio's job
# runtime (end_fsync=1), dd's elapsed time (conv=fsync), the program's timer
# (ImageWriter Open..Commit; first open..directory fsync) — so no tool is
# charged its process start-up (~0.3 s for fio here). dd writes zeros, fio
# and the program random bytes.
set -euo pipefail

build=build
dir=/var/tmp/phos-image-compare
rounds=3
settle=2
json_out=
extra=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done

prog=$build/tests/bench/image_write_compare
[[ -x $prog ]] || { echo "image_write_compare.sh: $prog is missing; build the image_write_compare target" >&2; exit 2; }
mkdir -p "$dir"
fstype=$(findmnt -no FSTYPE -T "$dir" 2>/dev/null || df -T "$dir" | awk 'NR==2 {print $2}')
source_dev=$(findmnt -no SOURCE -T "$dir" 2>/dev/null || echo unknown)
echo "directory: $dir, filesystem: $fstype on $source_dev; kernel $(uname -r), $(nproc) cores"
case $fstype in
  tmpfs|ramfs)
    echo "image_write_compare.sh: $dir is on $fstype: O_DIRECT fails or measures memory copies; use --dir on a disk" >&2
    exit 2 ;;
esac

plan=$("$prog" --plan-only "${extra[@]}")
read -r bytes chunk_kib qd buffers < <(python3 -c '
import json, sys
p = json.loads(sys.argv[1])
print(p["bytes"], p["chunk_kib"], p["queue_depth"], p["buffers"])' "$plan")
echo "buffer mix: $plan"

have_fio=0
if command -v fio >/dev/null; then
  have_fio=1
  echo "fio: $(fio --version)"
else
  echo "fio: not installed, skipped"
fi

work=$dir/run-$$
results=$work.results
mkdir -p "$work"
trap 'rm -rf "$work" "$results"' EXIT
: >"$results"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

bs_bytes=$((chunk_kib * 1024))
blocks=$(((bytes + bs_bytes - 1) / bs_bytes))
fio_bytes=$(((bytes + 4095) / 4096 * 4096))

settle() { sync; sleep "$settle"; }

run_dd() {  # $1 round
  local out
  settle
  out=$(LC_ALL=C dd if=/dev/zero of="$work/dd.dat" bs="$bs_bytes" count="$blocks" \
        oflag=direct conv=fsync 2>&1 | tail -1)
  # "N bytes (...) copied, S s, R MB/s"
  python3 -c '
import re, sys
m = re.match(r"(\d+) bytes .* copied, ([0-9.e+-]+) s", sys.argv[2])
if not m: sys.exit("dd: cannot parse: " + sys.argv[2])
b, s = int(m.group(1)), float(m.group(2))
print(sys.argv[1], "dd", b / s / 1e6, s)' "$1" "$out" >>"$results"
  rm -f "$work/dd.dat"
}

run_fio() {  # $1 round
  ((have_fio)) || return 0
  settle
  fio --name=phos-compare --filename="$work/fio.dat" --rw=write --bs="$bs_bytes" \
      --size="$fio_bytes" --direct=1 --ioengine=io_uring --iodepth="$qd" --end_fsync=1 \
      --fallocate=none --output-format=json >"$work/fio.json"
  python3 -c '
import json, sys
j = json.load(open(sys.argv[2]))["jobs"][0]
s = j["job_runtime"] / 1000.0
print(sys.argv[1], "fio", j["write"]["io_bytes"] / s / 1e6, s)' "$1" "$work/fio.json" >>"$results"
  rm -f "$work/fio.dat" "$work/fio.json"
}

run_prog() {  # $1 round (the program settles before each of its two writers)
  "$prog" --dir "$work" --rounds 1 --first-round "$1" --settle "$settle" --json "${extra[@]}" >"$work/prog.json"
  python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print(r["round"], r["method"], r["mbps"], r["seconds"])' "$work/prog.json" >>"$results"
}

for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    run_dd "$r"; run_fio "$r"; run_prog "$r"
  else
    run_prog "$r"; run_fio "$r"; run_dd "$r"
  fi
  grep "^$r " "$results" | awk '{printf "round %s  %-5s %8.1f MB/s  %7.3f s\n", $1, $2, $3, $4}'
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$results" "$json_out" "$dir" "$fstype" "$plan" "$have_fio" <<'EOF'
import json, statistics, sys
path, json_out, d, fstype, plan, have_fio = sys.argv[1:7]
rows = {}
for line in open(path):
    r, m, mbps, s = line.split()
    rows.setdefault(int(r), {})[m] = float(mbps)
methods = ["phos", "posix", "dd"] + (["fio"] if have_fio == "1" else [])
ratios = {"phos/dd": ("dd", 0.9), "phos/fio": ("fio", 0.9), "phos/posix": ("posix", 2.0)}
print("\nround |" + "".join(f" {m:>8} MB/s |" for m in methods) + "".join(f" {k:>10} |" for k in ratios))
per_round = []
for r in sorted(rows):
    row = rows[r]
    rr = {k: row["phos"] / row[b] for k, (b, _) in ratios.items() if b in row and "phos" in row}
    per_round.append({"round": r, "mbps": row, "ratios": rr})
    print(f"{r:5} |" + "".join(f" {row.get(m, 0):13.1f} |" for m in methods)
          + "".join(f" {rr[k]:9.2f}x |" if k in rr else f" {'-':>10} |" for k in ratios))
med = {k: statistics.median([p["ratios"][k] for p in per_round]) for k in ratios
       if all(k in p["ratios"] for p in per_round)}
med_mbps = {m: statistics.median([p["mbps"][m] for p in per_round]) for m in methods}
print("median|" + "".join(f" {med_mbps[m]:13.1f} |" for m in methods)
      + "".join(f" {med[k]:9.2f}x |" if k in med else f" {'-':>10} |" for k in ratios))
for k, (b, goal) in ratios.items():
    if k in med:
        print(f"{k}: median {med[k]:.2f}x, goal >= {goal}x: {'met' if med[k] >= goal else 'NOT met'}")
if have_fio != "1":
    print("phos/fio: fio: not installed, skipped")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"dir": d, "fs": fstype, "plan": json.loads(plan), "rounds": per_round,
                   "median_mbps": med_mbps, "median_ratios": med,
                   "goals": {k: g for k, (_, g) in ratios.items()}}, f, indent=1)
    print("json:", json_out)
EOF
