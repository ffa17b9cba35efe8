#!/usr/bin/env bash
# Runs every GPU check of phos from a bundle (scripts/gpu-bundle.sh) on a
# machine with an NVIDIA GPU, and writes a report of what passed, failed or
# was skipped, with timings. Run it from the repo root:
#
#   bash tests/gpu/run.sh [--backend cuda|sim] [BUNDLE_DIR] [REPORT_DIR]
#        (defaults: cuda, gpu-bundle, gpu-report)
#
# REPORT_DIR gets report.txt (a table), report.json (the same + environment)
# and logs.tar.gz (every check's output, phosd's log, gtest JSON), flat, so
# the device tool can copy it back. Exit status: 0 when nothing failed
# (skips included: no GPU means every check "skipped: no GPU", never a pass),
# 1 when a check failed, 2 on a usage or bundle error.
#
# --backend sim is for developing this script on a machine without a GPU:
# phosd runs its simulator, the phos-run checks execute for real, and the
# native runs (which need a GPU) are skipped. The report says backend=sim.
set -euo pipefail

backend=cuda
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --backend) backend=${2:?--backend needs cuda or sim}; shift 2 ;;
    --backend=*) backend=${1#--backend=}; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "$backend" == cuda || "$backend" == sim ]] || { echo "run.sh: --backend is cuda or sim" >&2; exit 2; }
bundle=${args[0]:-gpu-bundle}
report=${args[1]:-gpu-report}
[[ -f "$bundle/payload.tar.xz" ]] || { echo "run.sh: no $bundle/payload.tar.xz (build it: scripts/gpu-bundle.sh)" >&2; exit 2; }
mkdir -p "$report"
report=$(cd "$report" && pwd)

# Everything transient lives in one private dir (short path: unix socket
# paths are limited to 108 bytes).
work=$(mktemp -d /tmp/phos-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT  # replaced by cleanup() once phosd may run
logs=$work/logs
mkdir -p "$logs"
results=$work/results.tsv
: >"$results"
: >"$report/results.tsv"
run_started=$(date +%s.%N)

# ---- unpack ---------------------------------------------------------------
# xz may be missing on the GPU machine's distro; python3 (there with
# PyTorch) unpacks .tar.xz by itself.
b=$work/bundle
mkdir -p "$b"
if command -v xz >/dev/null; then
  tar -C "$b" -xJf "$bundle/payload.tar.xz" || { echo "run.sh: cannot unpack $bundle/payload.tar.xz" >&2; exit 2; }
else
  python3 -c 'import sys, tarfile
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # no warning on 3.12+
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$bundle/payload.tar.xz" "$b" ||
    { echo "run.sh: cannot unpack $bundle/payload.tar.xz" >&2; exit 2; }
fi
git_rev=$(sed -n 's/^git_rev: //p' "$b/MANIFEST.txt")
read -r -a gpu_tests <<<"$(sed -n 's/^gpu_tests: //p' "$b/MANIFEST.txt")"
read -r -a apps <<<"$(sed -n 's/^apps: //p' "$b/MANIFEST.txt")"

# ---- environment ------------------------------------------------------------
# The bundle's libraries first. libstdc++/libgcc_s (lib/compat) only when the
# machine's libstdc++ lacks the newest GLIBCXX version ours has: a newer
# system one must win, since the machine's own libraries (cuBLAS, ...) may
# need it.
libpath=$b/lib
need_glibcxx=$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$b/lib/compat/libstdc++.so.6" | sort -t. -k3 -n | tail -1)
sys_stdcxx=$( (ldconfig -p 2>/dev/null || true) | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
if [[ -n "$sys_stdcxx" ]] && grep -qa "$need_glibcxx" "$sys_stdcxx"; then
  cxx_runtime="system ($sys_stdcxx has $need_glibcxx)"
else
  libpath=$b/lib/compat:$libpath
  cxx_runtime="bundle (system libstdc++ '${sys_stdcxx:-none}' lacks $need_glibcxx)"
fi
# The machine's CUDA runtime (libcudart.so.13) for the -cudart shared
# programs, in case the loader does not already know the toolkit's lib dir.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && libpath=$libpath:$d
done
# phosd's cuda backend dlopen()s libcublas.so.13; where the toolkit's copy
# is not on the loader's path, PyTorch's pip wheels (nvidia/*/lib) hold one.
known() { (ldconfig -p 2>/dev/null || true) | grep -qF "$1" || compgen -G "/usr/local/cuda/lib64/$1" >/dev/null; }
if ! known libcublas.so.13 || ! known libcudart.so.13; then
  for d in $(python3 -c 'import glob, site
for p in site.getsitepackages(): print(" ".join(glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null || true); do
    libpath=$libpath:$d
  done
fi
# NCCL (for nccl_ranks and phosd's collectives on the cuda backend): the
# bundle carries none (218 MB); PyTorch's wheels hold one
# (nvidia/nccl/lib/libnccl.so.2). phosd is given its path
# (--nccl-library), the gtest too (PHOS_GPU_NCCL_LIBRARY).
nccl_lib=""
if ! known libnccl.so.2; then
  nccl_lib=$(python3 -c 'import glob, site
print(next(iter(sorted(f for p in site.getsitepackages() for f in glob.glob(p + "/nvidia/nccl/lib/libnccl.so.2"))), ""))' 2>/dev/null || true)
  [[ -n "$nccl_lib" ]] && libpath=$libpath:${nccl_lib%/*}
fi
export PHOS_GPU_NCCL_LIBRARY=$nccl_lib
# criu/lib last: it serves the carried criu (phosd execs it) and nothing else.
[[ -d "$b/criu/lib" ]] && libpath=$libpath:$b/criu/lib
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
phos=$b/bin/phos
lib=$b/lib/libphos.so

gpu_name=none driver=none cuda_version=none
have_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >"$logs/nvidia-smi.txt" 2>&1 && grep -q '^GPU ' "$logs/nvidia-smi.txt"; then
  have_gpu=1
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  cuda_version=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
  nvidia-smi >>"$logs/nvidia-smi.txt" 2>&1 || true
fi
no_gpu_reason=""
if [[ $have_gpu == 0 && $backend == cuda ]]; then
  if command -v nvidia-smi >/dev/null; then no_gpu_reason="skipped: no GPU (nvidia-smi lists none)"
  else no_gpu_reason="skipped: no GPU (no nvidia-smi)"; fi
fi

# ---- recording --------------------------------------------------------------
now() { date +%s.%N; }
# elapsed T0 T1: seconds between two now()s (awk: bc may be missing there).
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
record() {  # record NAME RESULT SECONDS REASON (also printed: a run cut off still shows its progress)
  local reason=${4//$'\t'/ }
  printf '%s\t%s\t%.2f\t%s\n' "$1" "$2" "$3" "${reason//$'\n'/ }" >>"$results"
  [[ -z "${report:-}" ]] || printf '%s\t%s\t%.2f\t%s\n' "$1" "$2" "$3" "${reason//$'\n'/ }" >>"$report/results.tsv"
  printf 'run.sh: %-44s %-4s %7.2fs %s\n' "$1" "$2" "$3" "${reason//$'\n'/ }" | cut -c1-220
}
# A device lease is short: past PHOS_GPU_DEADLINE_S seconds (from start) every
# further check is skipped "out of time" instead of run, so the report still
# gets written inside the caller's limit.
deadline_s=${PHOS_GPU_DEADLINE_S:-0}
clip_limit() {  # clip_limit SECONDS: SECONDS, or what is left before the deadline (at least 5)
  local left
  if [[ $deadline_s == 0 ]]; then echo "$1"; return; fi
  left=$(awk -v a="$run_started" -v b="$(now)" -v d="$deadline_s" 'BEGIN { printf "%d", d - (b - a) }')
  (( left < 5 )) && left=5
  (( left < $1 )) && echo "$left" || echo "$1"
}
# PHOS_GPU_SECTIONS: a comma list of the sections to run — gtest,
# frameworks, trace, apps, engine, process, bench, integration — to spend a short
# lease on what a change touched (default: all). Checks of the others are
# skipped, saying so; phosd starts and stops either way.
sections=${PHOS_GPU_SECTIONS:-all}
cur_section=""
section() { cur_section=$1; }
section_off() { [[ $sections != all && ",$sections," != *",$cur_section,"* ]]; }
out_of_time() {
  section_off && return 0
  [[ $deadline_s != 0 ]] && awk -v a="$run_started" -v b="$(now)" -v d="$deadline_s" 'BEGIN { exit !(b - a > d) }'
}
# The reason a check out_of_time stopped is skipped.
why_skipped() {
  if section_off; then echo "skipped: section $cur_section is not in PHOS_GPU_SECTIONS=$sections"
  else echo "skipped: out of time (PHOS_GPU_DEADLINE_S=$deadline_s)"; fi
}
skip() { record "$1" skip 0 "$2"; }

# check NAME TIMEOUT_S EXPECTED_RC -- COMMAND...
# Runs COMMAND (stdout+stderr to logs/NAME.log) under a timeout and passes
# when it exits with EXPECTED_RC and its output satisfies the expectations
# set just before the call:
#   want=(...)     strings the output must contain
#   wantnot=(...)  strings it must not contain
#   once=(...)     strings it must contain exactly once
check() {
  local name=$1 limit=$2 expect=$3; shift 4
  local log=$logs/$name.log t0 t1 rc=0 why="" s n skip_why=$no_gpu_reason
  [[ "$1" != "$phos" ]] || skip_why=$phos_skip  # a phos-run check also needs phosd
  [[ -n "$skip_why" ]] || ! out_of_time || skip_why=$(why_skipped)
  if [[ -n "$skip_why" ]]; then skip "$name" "$skip_why"; want=() wantnot=() once=(); return 0; fi
  mkdir -p "$(dirname "$log")"
  limit=$(clip_limit "$limit")
  t0=$(now)
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null || rc=$?
  t1=$(now)
  if [[ $rc == 124 || $rc == 137 ]]; then why="timed out after ${limit}s"
  elif [[ $rc != "$expect" ]]; then why="exit status $rc, expected $expect"
  fi
  for s in "${want[@]}"; do [[ -n "$why" ]] || grep -qF -- "$s" "$log" || why="output lacks '$s'"; done
  for s in "${wantnot[@]}"; do [[ -n "$why" ]] || ! grep -qF -- "$s" "$log" || why="output has '$s'"; done
  for s in "${once[@]}"; do
    n=$(grep -cF -- "$s" "$log" || true)
    [[ -n "$why" || $n == 1 ]] || why="'$s' not exactly once (${n}x)"
  done
  if [[ -z "$why" ]]; then record "$name" pass "$(elapsed "$t0" "$t1")" "exit $rc, expected output"
  else record "$name" fail "$(elapsed "$t0" "$t1")" "$why (log: logs/$name.log: $(tail -1 "$log" | cut -c1-120))"; fi
  want=() wantnot=() once=()
}
want=() wantnot=() once=()

# ---- phosd --------------------------------------------------------------------
sock=$work/phosd.sock
daemon_pid=""
stop_daemon() {
  [[ -n "$daemon_pid" ]] || return 0
  kill -TERM "$daemon_pid" 2>/dev/null || true
  for _ in $(seq 150); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$daemon_pid" 2>/dev/null; then
    echo "run.sh: phosd did not stop on SIGTERM within 15 s; killing it" >>"$logs/phosd.log"
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { stop_daemon; rm -rf "$work"; }
trap cleanup EXIT
start_daemon() {  # phos daemon in the background; ready when `phos status` answers
  local t0 t1
  t0=$(now)
  local criu_args=()
  [[ -x "$b/criu/criu" ]] && criu_args=(--criu-binary "$b/criu/criu")
  [[ -n "$nccl_lib" && $backend == cuda ]] && criu_args+=(--nccl-library "$nccl_lib")
  "$phos" daemon --backend "$backend" --socket "$sock" "${criu_args[@]}" >"$logs/phosd.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 600); do
    if "$phos" --socket "$sock" status >"$logs/phos-status.log" 2>&1; then
      t1=$(now)
      record "phosd/start" pass "$(elapsed "$t0" "$t1")" "phos daemon --backend $backend answered phos status"
      return 0
    fi
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  t1=$(now)
  local why="did not answer phos status within 60 s"
  kill -0 "$daemon_pid" 2>/dev/null || why="exited before answering"
  record "phosd/start" fail "$(elapsed "$t0" "$t1")" "phos daemon --backend $backend $why (logs/phosd.log: $(tail -1 "$logs/phosd.log" | cut -c1-160))"
  stop_daemon
  return 1
}
restart_daemon() {  # restart_daemon WHY: a fresh phosd (on the same socket)
  [[ -z "$phos_skip" ]] || return 0
  ! section_off || return 0  # the program that needed it did not run
  stop_daemon
  mv "$logs/phosd.log" "$logs/phosd.$(date +%s%N).log" 2>/dev/null || true
  start_daemon || { phos_skip="skipped: phosd did not restart ($1)"; return 0; }
  record "phosd/restart" info 0 "$1"
}
# `phos run` as an argv prefix (check runs it under timeout, so no function).
phos_run=("$phos" --socket "$sock" run --lib "$lib" --)
i=$b/integration  # the tests/integration programs (checkpoint_app among them)

# ---- 1. gtest binaries labelled gpu ------------------------------------------------
section gtest
# One row per test from gtest's JSON; a binary that crashed before writing
# it gets one failed row.
gtest_rows() {  # gtest_rows BINARY JSON LOG RC SECONDS CASE
  # (also to the report's results.tsv, which a run cut off still brings back)
  python3 - "$@" <<'PY' | tee -a "$report/results.tsv" >>"$results"
import json, sys
binary, path, log, rc, secs = sys.argv[1:6]
case = sys.argv[6] if len(sys.argv) > 6 else ""
try:
    data = json.load(open(path))
except Exception as e:
    tail = open(log, errors="replace").read().strip().splitlines()[-1:] or [""]
    print(f"gtest/{binary}{'/' + case if case else ''}\tfail\t{float(secs):.2f}\tno gtest JSON ({e.__class__.__name__}); exit {rc}; {tail[0][:120]}")
    sys.exit()
text = open(log, errors="replace").read()
for suite in data.get("testsuites", []):
    for t in suite.get("testsuite", []):
        name = f"gtest/{binary}/{suite['name']}.{t['name']}"
        secs_t = float(t.get("time", "0s").rstrip("s") or 0)
        if t.get("failures"):
            msg = t["failures"][0].get("failure", "").replace("\n", " ").replace("\t", " ")[:160]
            print(f"{name}\tfail\t{secs_t:.2f}\t{msg}")
        elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
            # The reason is in the output (gtest's JSON has no skip message).
            reason = next((l.strip() for l in text.splitlines()
                           if "skipped: " in l and (t["name"] in l or "no GPU" in l)), "skipped")
            print(f"{name}\tskip\t{secs_t:.2f}\t{reason[:160]}")
        else:
            print(f"{name}\tpass\t{secs_t:.2f}\tpassed")
PY
}
# Each test case runs in its own process (60 s each): on a GPU one that
# hangs in the driver (a context destroy waiting for a kernel, say) keeps
# driver locks, and every later test of the same process would hang behind
# it. PHOS_GPU_GTEST_EXCLUDE (a gtest negative filter, e.g.
# '*AnAbandoned*') skips known results to save lease time; skipped rows say so.
for t in "${gpu_tests[@]}"; do
  if [[ -n "$no_gpu_reason" ]]; then skip "gtest/$t" "$no_gpu_reason"; continue; fi
  mapfile -t cases < <("$b/bin/$t" --gtest_list_tests 2>/dev/null |
    awk '/^[^ ]/ { suite = $1 } /^  [^ ]/ { print suite $1 }')
  [[ ${#cases[@]} -gt 0 ]] || { record "gtest/$t" fail 0 "--gtest_list_tests listed no test"; continue; }
  for c in "${cases[@]}"; do
    if [[ -n "${PHOS_GPU_GTEST_EXCLUDE:-}" ]] && [[ "$c" == $PHOS_GPU_GTEST_EXCLUDE ]]; then
      skip "gtest/$t/$c" "skipped: excluded by PHOS_GPU_GTEST_EXCLUDE='$PHOS_GPU_GTEST_EXCLUDE' (see docs/gpu-report.md)"
      continue
    fi
    if out_of_time; then skip "gtest/$t/$c" "$(why_skipped)"; continue; fi
    t0=$(now) rc=0 f=${c//\//_}  # parameterised names hold '/'
    timeout -k 5 "$(clip_limit 60)" "$b/bin/$t" --gtest_filter="$c" --gtest_output="json:$logs/$t.$f.json" \
      >"$logs/gtest-$t.$f.log" 2>&1 </dev/null || rc=$?
    t1=$(now)
    gtest_rows "$t" "$logs/$t.$f.json" "$logs/gtest-$t.$f.log" "$rc" "$(elapsed "$t0" "$t1")" "$c"
    [[ $rc == 0 ]] || grep -q $'^gtest/'"$t/$c"$'\tfail' "$results" ||
      record "gtest/$t/$c" fail "$(elapsed "$t0" "$t1")" "exit status $rc with no failed test in its JSON ($([[ $rc == 124 || $rc == 137 ]] && echo 'timed out after 60 s; ')$(tail -1 "$logs/gtest-$t.$f.log" | cut -c1-100))"
  done
done

# Without phosd every phos-run check would fail for the same reason: fail
# phosd/start once and skip the phos-run checks (native runs still go).
phos_skip=$no_gpu_reason
if [[ -z "$no_gpu_reason" ]] && ! start_daemon; then phos_skip="skipped: phosd did not start (see phosd/start)"; fi

# (Frameworks run first on a fresh phosd: a short lease cut off by
# PHOS_GPU_DEADLINE_S still says how far PyTorch gets.)
# ---- 2. frameworks nobody here wrote: native vs phos run ----------------------------
section frameworks
# Each script prints deterministic lines (fixed seeds); under phos run it must
# print the same. How far each gets under phos is in its log.
py=$work/py
mkdir -p "$py"
cat >"$py/torch_train.py" <<'PY'
import torch
torch.manual_seed(0)
dev = "cuda"
x = torch.randn(512, 32, device=dev); w_true = torch.randn(32, 1, device=dev)
y = x @ w_true + 0.1 * torch.randn(512, 1, device=dev)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(200):
    opt.zero_grad(); loss = torch.nn.functional.mse_loss(model(x), y); loss.backward(); opt.step()
    if step % 50 == 0 or step == 199: print(f"step {step} loss {loss.item():.4f}", flush=True)
with torch.no_grad(): print(f"inference {model(x[:4]).sum().item():.4f}")
print("torch_train: OK")
PY
cat >"$py/torch_elementwise.py" <<'PY'
import torch
a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
print(f"sum {(a * 2 + 1).sum().item():.1f}")
print("torch_elementwise: OK")
PY
cat >"$py/cupy_kernels.py" <<'PY'
import cupy as cp
a = cp.arange(1 << 20, dtype=cp.float32)
print(f"elementwise {float((a * 2 + 1).sum()):.1f}")
k = cp.RawKernel(r'extern "C" __global__ void sq(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * x[i]; }', "sq")
b = cp.arange(1024, dtype=cp.float32); k((4,), (256,), (b, cp.int32(1024)))
print(f"rawkernel {float(b.sum()):.1f}")
print("cupy_kernels: OK")
PY
# CUDA graphs (docs/interposer.md "CUDA graphs"): elementwise work captured
# and replayed first (no cuBLAS), then a small model's forward pass.
cat >"$py/torch_graphs.py" <<'PY'
import torch
torch.manual_seed(0)
dev = "cuda"
static_x = torch.zeros(4096, device=dev)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(2): static_y = torch.sin(static_x * 2 + 1).cumsum(0)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = torch.sin(static_x * 2 + 1).cumsum(0)
for i in range(3):
    x = torch.randn(4096, device=dev)
    static_x.copy_(x); g.replay()
    print(f"elementwise replay {i} sum {static_y.sum().item():.3f} eq {torch.equal(static_y, torch.sin(x * 2 + 1).cumsum(0))}", flush=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dev).eval()
static_in = torch.randn(16, 32, device=dev)
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3): model(static_in)
torch.cuda.current_stream().wait_stream(s)
gm = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(gm):
    static_out = model(static_in)
for i in range(3):
    x = torch.randn(16, 32, device=dev)
    static_in.copy_(x); gm.replay()
    with torch.no_grad(): eager = model(x)
    print(f"model replay {i} sum {static_out.sum().item():.4f} maxdiff {(static_out - eager).abs().max().item():.6f}", flush=True)
print("torch_graphs: OK")
PY
cat >"$py/numba_kernel.py" <<'PY'
import numpy as np
from numba import cuda
@cuda.jit
def axpy(a, x, y):
    i = cuda.grid(1)
    if i < x.size: y[i] = a * x[i] + y[i]
x = np.arange(4096, dtype=np.float32); y = np.ones(4096, dtype=np.float32)
dy = cuda.to_device(y); axpy[16, 256](2.0, cuda.to_device(x), dy)
print(f"axpy {dy.copy_to_host().sum():.1f}")
print("numba_kernel: OK")
PY
# phosd's failure messages go to the app's stderr (its log) here.
export PHOS_TRACE_ERRORS=1
for s in torch_elementwise torch_train torch_graphs cupy_kernels numba_kernel; do
  if [[ $backend == sim ]]; then skip "frameworks/$s" "skipped: backend=sim (tests/integration runs CuPy/numba on the sim)"; continue; fi
  if out_of_time; then skip "frameworks/$s" "$(why_skipped)"; continue; fi
  want=("$s: OK")
  check "frameworks/$s/native" 90 0 -- python3 "$py/$s.py"
  [[ -n "$no_gpu_reason" ]] && continue
  want=("$s: OK")
  check "frameworks/$s/phos" 90 0 -- "${phos_run[@]}" python3 "$py/$s.py"
  nat=$(grep -v '^phos' "$logs/frameworks/$s/native.log" 2>/dev/null | grep -E '^(step|inference|sum|elementwise|rawkernel|axpy|model) ' || true)
  ph=$(grep -E '^(step|inference|sum|elementwise|rawkernel|axpy|model) ' "$logs/frameworks/$s/phos.log" 2>/dev/null || true)
  if [[ -n "$nat" && "$nat" == "$ph" ]]; then record "frameworks/$s/same-output" pass 0 "$(tail -1 <<<"$nat")"
  elif [[ -f "$logs/frameworks/$s/phos.log" ]]; then
    record "frameworks/$s/same-output" fail 0 "native '$(tail -1 <<<"$nat")' vs phos '$(tail -1 <<<"$ph")'; phos log: $(grep -m3 -E 'phos|rror' "$logs/frameworks/$s/phos.log" | tr '\n' ' ' | cut -c1-200)"
  fi
done

# PyTorch training checkpointed and restored while it lives: a GPU-only cow
# checkpoint at step 50, GPU-only restore after step 100 (the next 50 steps
# must print the step-100 loss again), then a whole-process checkpoint with
# --kill and a restore, after which steps 101..150 must print what native
# training prints at step 150.
cat >"$py/torch_ckpt.py" <<'PY'
import os, sys, time, torch
ctl = sys.argv[1]  # "-" natively: no waits
torch.manual_seed(0)
dev = "cuda"
x = torch.randn(4096, 256, device=dev); w = torch.randn(256, 1, device=dev); y = x @ w
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
def train(n):
    for _ in range(n):
        opt.zero_grad(); loss = torch.nn.functional.mse_loss(model(x), y); loss.backward(); opt.step()
    return loss.item()
def wait(name):
    if ctl == "-": return
    print(f"waiting {name} pid {os.getpid()}", flush=True)
    open(f"{ctl}/{name}.ready", "w").close()
    for _ in range(2400):
        if os.path.exists(f"{ctl}/{name}.go"): return
        time.sleep(0.05)
    print(f"no {name}.go in 120 s"); sys.exit(3)
train(50); torch.cuda.synchronize()
wait("gpu-checkpoint")
print(f"s100 {train(50):.6f}", flush=True)
if ctl != "-":
    wait("gpu-restore")
    print(f"s100 {train(50):.6f}", flush=True)
wait("process-checkpoint")
print(f"s150 {train(50):.6f}", flush=True)
print("torch_ckpt: OK", flush=True)
PY
torch_ckpt_checks() {
  local ctl=$work/torch-ctl log=$logs/frameworks/torch_ckpt/phos.log runner t0 nat ph img=$work/torch-gpu pimg=$work/torch-proc
  mkdir -p "$ctl" "$logs/frameworks/torch_ckpt"
  if [[ $backend == sim ]]; then skip frameworks/torch_ckpt "skipped: backend=sim (PyTorch's kernels carry no PTX)"; return 0; fi
  want=("torch_ckpt: OK")
  check frameworks/torch_ckpt/native 120 0 -- python3 "$py/torch_ckpt.py" -
  if [[ -n "$phos_skip" ]] || out_of_time; then skip frameworks/torch_ckpt/phos "${phos_skip:-$(why_skipped)}"; return 0; fi
  waitfor() {  # waitfor NAME: the script is waiting at NAME (120 s)
    for _ in $(seq 1200); do [[ -f "$ctl/$1.ready" ]] && return 0; kill -0 "$runner" 2>/dev/null || return 1; sleep 0.1; done; return 1
  }
  t0=$(now)
  PHOS_TRACE_ERRORS=1 "$phos" --socket "$sock" run --lib "$lib" --name torchck -- python3 "$py/torch_ckpt.py" "$ctl" >"$log" 2>&1 </dev/null &
  runner=$!
  if ! waitfor gpu-checkpoint; then record frameworks/torch_ckpt/phos-start fail "$(elapsed "$t0" "$(now)")" "did not reach step 50 under phos: $(grep -m2 -E 'phos|Error' "$log" | tr '\n' ' ' | cut -c1-200)"; kill "$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true; return 0; fi
  record frameworks/torch_ckpt/phos-start pass "$(elapsed "$t0" "$(now)")" "50 training steps under phos run"
  want=("checkpoint OK: $img" "stall ")
  check frameworks/torch_ckpt/gpu-checkpoint 120 0 -- "$phos" --socket "$sock" checkpoint torchck --gpu-only --mode cow --out "$img"
  [[ -f "$logs/frameworks/torch_ckpt/gpu-checkpoint.log" ]] && record frameworks/torch_ckpt/gpu-checkpoint/stall info 0 "$(stall_of "$logs/frameworks/torch_ckpt/gpu-checkpoint.log")"
  touch "$ctl/gpu-checkpoint.go"
  if ! waitfor gpu-restore; then record frameworks/torch_ckpt/after-checkpoint fail 0 "did not reach step 100 after the checkpoint: $(tail -2 "$log" | tr '\n' ' ' | cut -c1-200)"; kill "$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true; return 0; fi
  want=("restore OK: $img")
  check frameworks/torch_ckpt/gpu-restore 120 0 -- "$phos" --socket "$sock" restore "$img" --gpu-only --pid torchck
  touch "$ctl/gpu-restore.go"
  if ! waitfor process-checkpoint; then record frameworks/torch_ckpt/after-restore fail 0 "did not train on after the GPU restore: $(tail -2 "$log" | tr '\n' ' ' | cut -c1-200)"; kill "$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true; return 0; fi
  mapfile -t ph < <(grep -E '^s100 ' "$log")
  nat=$(grep -E '^s100 ' "$logs/frameworks/torch_ckpt/native.log" || true)
  if [[ ${#ph[@]} == 2 && "${ph[0]}" == "${ph[1]}" ]]; then record frameworks/torch_ckpt/gpu-restore-replays pass 0 "steps 51..100 after restoring step 50 print the same loss: ${ph[1]} (native: ${nat:-none})"
  else record frameworks/torch_ckpt/gpu-restore-replays fail 0 "first '${ph[0]:-}' vs after restore '${ph[1]:-}' (native: ${nat:-none})"; fi
  if [[ ! -x "$b/criu/criu" ]] || out_of_time; then skip frameworks/torch_ckpt/process-checkpoint "skipped: no criu or out of time"; touch "$ctl/process-checkpoint.go"; wait "$runner" 2>/dev/null || true; return 0; fi
  want=("checkpoint OK: $pimg")
  check frameworks/torch_ckpt/process-checkpoint 180 0 -- "$phos" --socket "$sock" checkpoint torchck --out "$pimg" --kill
  wait "$runner" 2>/dev/null || true
  [[ -f "$pimg/criu/inventory.img" ]] || return 0
  want=("restored pid ")
  check frameworks/torch_ckpt/process-restore 180 0 -- "$phos" --socket "$sock" restore "$pimg" --detach
  touch "$ctl/process-checkpoint.go"
  for _ in $(seq 600); do grep -q -e '^torch_ckpt: OK' -e '^no process' "$log" && break; sleep 0.1; done
  ph=$(grep -E '^s150 ' "$log" || true); nat=$(grep -E '^s150 ' "$logs/frameworks/torch_ckpt/native.log" || true)
  if [[ -n "$nat" && "$ph" == "$nat" ]]; then record frameworks/torch_ckpt/process-restore-continues pass 0 "the restored process trained on to native's step 150: $ph"
  else record frameworks/torch_ckpt/process-restore-continues fail 0 "native '$nat' vs restored '$ph' ($(tail -1 "$log" | cut -c1-120))"; fi
}
torch_ckpt_checks
unset PHOS_TRACE_ERRORS

# ---- 2b. the driver's private tables, traced natively ---------------------------------
section trace
# libphos_export_trace.so (tests/gpu/export_trace) logs every call the CUDA
# libraries make through the driver's private tables (cuGetExportTable)
# against the real driver: what phos must serve for cuFFT (tables
# 21318c60-... and 6e163fbe-..., docs/compatibility.md) and for PyTorch
# (69a28e9f-...). Native runs only; the traces come back under logs/trace/
# for a later session to implement the slots from (docs/export-tables-research.md).
trace_native() {  # trace_native NAME SCRIPT: run SCRIPT natively under the tracer
  local name=$1 script=$2 t0 t1 rc=0 out=$logs/trace/$1.txt
  if [[ -n "$no_gpu_reason" ]] || section_off || out_of_time; then
    skip "trace/$name" "${no_gpu_reason:-$(section_off && echo "skipped: section trace is not in PHOS_GPU_SECTIONS=$sections" || why_skipped)}"
    return 0
  fi
  [[ -f "$b/lib/libphos_export_trace.so" ]] || { skip "trace/$name" "skipped: the bundle carries no libphos_export_trace.so"; return 0; }
  mkdir -p "$logs/trace"
  t0=$(now)
  PHOS_EXPORT_TRACE=$out LD_PRELOAD=$b/lib/libphos_export_trace.so timeout -k 5 "$(clip_limit 120)" python3 "$script" \
    >"$logs/trace/$name.log" 2>&1 </dev/null || rc=$?
  t1=$(now)
  local tables slots
  tables=$(grep -c '^export-trace: table ' "$out" 2>/dev/null || true)
  slots=$( (grep '^export-trace: summary ' "$out" 2>/dev/null || true) | sed 's/^export-trace: summary //; s/ called / x/; s/ times$//' | tr '\n' ' ' | cut -c1-600)
  record "trace/$name" info "$(elapsed "$t0" "$t1")" "exit $rc; ${tables:-0} tables handed out; slots called: ${slots:-none} (logs/trace/$name.txt)"
}
cat >"$py/trace_cupy_fft.py" <<'PY'
import cupy as cp
x = cp.arange(64, dtype=cp.complex64)
print("fft", complex(cp.fft.fft(x)[1]))
PY
cat >"$py/trace_torch.py" <<'PY'
import torch
lin = torch.nn.Linear(32, 16).cuda()
print("linear", float(lin(torch.ones(4, 32, device="cuda")).sum()))
print("fft", complex(torch.fft.fft(torch.arange(64.0, device="cuda"))[1]))
PY
trace_native cupy_fft "$py/trace_cupy_fft.py"
trace_native torch "$py/trace_torch.py"

# ---- 3. tests/apps: native vs phos run ---------------------------------------------
section apps
# Each program checks its results against a CPU reference and prints
# "<name>: checksum 0x... OK"; native and phos must print the same lines.
checksums() { grep -E '^[A-Za-z0-9_]+: checksum 0x[0-9a-fA-F]+ .*OK$' "$1" || true; }
for a in "${apps[@]}"; do
  if out_of_time; then skip "apps/$a" "$(why_skipped)"; continue; fi
  want=("$a: checksum 0x" " OK") wantnot=("not supported by phos")
  check "apps/$a/phos" 180 0 -- "${phos_run[@]}" "$b/apps/$a"
  if [[ -n "$no_gpu_reason" ]]; then skip "apps/$a/native" "$no_gpu_reason"; skip "apps/$a/same-checksum" "$no_gpu_reason"; continue; fi

  if [[ $backend == sim ]]; then
    skip "apps/$a/native" "skipped: backend=sim (native runs need a GPU)"
    skip "apps/$a/same-checksum" "skipped: backend=sim (no native run)"
    continue
  fi
  want=("$a: checksum 0x" " OK")
  check "apps/$a/native" 120 0 -- "$b/apps/$a"
  if [[ -n "$phos_skip" ]]; then skip "apps/$a/same-checksum" "$phos_skip"; continue; fi
  native=$(checksums "$logs/apps/$a/native.log") phosout=$(checksums "$logs/apps/$a/phos.log")
  if [[ -n "$native" && "$native" == "$phosout" ]]; then
    record "apps/$a/same-checksum" pass 0 "$(head -1 <<<"$native")"
  else
    record "apps/$a/same-checksum" fail 0 "native '$(head -1 <<<"$native")' vs phos '$(head -1 <<<"$phosout")'"
  fi
done

# ---- 4. checkpoint_app: GPU-only checkpoints in every mode, restores, whole process ----
section engine
# checkpoint_app (tests/integration) is driven by command files CTL/cmd-N and
# acks each with "ack N"; checkpoint_restore_test.cc does the same on the sim.
app_pid="" app_log="" app_ctl="" app_next=0 app_runner=""
app_start() {  # app_start NAME: checkpoint_app under phos run; app_pid = its (session) pid
  app_ctl=$work/ctl-$1 app_log=$logs/$1.app.log app_next=0 app_pid=""
  mkdir -p "$app_ctl"
  "${phos_run[@]}" "$i/checkpoint_app" "$app_ctl" >"$app_log" 2>&1 </dev/null &
  app_runner=$!
  for _ in $(seq 600); do
    app_pid=$(sed -n 's/^checkpoint_app: ready pid \([0-9]*\).*/\1/p' "$app_log" | head -1)
    [[ -n "$app_pid" ]] && return 0
    kill -0 "$app_runner" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
app_out=""
app_cmd() {  # app_cmd TEXT: one command; waits 30 s for its ack; app_out = what it answered
  local n=$app_next before
  app_next=$((n + 1))
  before=$(wc -l <"$app_log")
  echo "$1" >"$app_ctl/cmd-$n.tmp" && mv "$app_ctl/cmd-$n.tmp" "$app_ctl/cmd-$n"
  for _ in $(seq 300); do
    if grep -qx "ack $n" "$app_log"; then app_out=$(tail -n +"$((before + 1))" "$app_log" | sed "/^ack $n\$/q"); return 0; fi
    sleep 0.1
  done
  app_out="no ack $n for '$1' in 30 s"
  return 1
}
app_stop() { [[ -z "$app_runner" ]] || { app_cmd quit || kill "$app_runner" 2>/dev/null; wait "$app_runner" 2>/dev/null; app_runner=""; } || true; }
field() { sed -n "s/.*$1 \([^ ]*\).*/\1/p" <<<"$2" | head -1; }
# The stall and copy lines of a checkpoint log, for the report.
stall_of() { grep -m1 -E 'stall [0-9]' "$1" | cut -c1-160; }

engine_checks() {
  local out sum3 mode img got t0
  local modes=(stop cow recopy)
  if [[ -n "$phos_skip" ]] || out_of_time; then
    for mode in "${modes[@]}"; do skip "engine/checkpoint-$mode" "${phos_skip:-$(why_skipped)}"; done
    return 0
  fi
  t0=$(now)
  if ! app_start engine; then
    record engine/app-start fail "$(elapsed "$t0" "$(now)")" "checkpoint_app did not start under phos run ($(tail -1 "$app_log" | cut -c1-120))"
    app_stop; return 0
  fi
  for _ in 1 2 3; do app_cmd step || break; done
  out=$app_out sum3=$(field checksum "$app_out")
  if [[ -z "$sum3" ]]; then record engine/steps fail 0 "no checksum after 3 steps: $(tail -1 <<<"$out")"; app_stop; return 0; fi
  for mode in "${modes[@]}"; do
    img=$work/img-$mode
    want=("checkpoint OK: $img" "stall ")
    check "engine/checkpoint-$mode" 120 0 -- "$phos" --socket "$sock" checkpoint --pid "$app_pid" --gpu-only --mode "$mode" --out "$img"
    [[ -f "$logs/engine/checkpoint-$mode.log" ]] && record "engine/checkpoint-$mode/stall" info 0 "$(stall_of "$logs/engine/checkpoint-$mode.log")"
  done
  # Move on, free a buffer, allocate another; each restore must undo that.
  for c in step step freescratch alloc; do app_cmd "$c" || true; done
  for mode in "${modes[@]}"; do
    img=$work/img-$mode
    [[ -f "$img/manifest" ]] || { skip "engine/restore-$mode" "skipped: no image (its checkpoint failed)"; continue; }
    want=("restore OK: $img")
    check "engine/restore-$mode" 120 0 -- "$phos" --socket "$sock" restore "$img" --gpu-only --pid "$app_pid"
    app_cmd print || true; out=$app_out
    got="checksum $(field checksum "$out") verify-step $(field verify-step "$out") verify-big $(field verify-big "$out") steps $(field steps "$out")"
    if [[ "$got" == "checksum $sum3 verify-step 3 verify-big 3 steps 3" ]]; then
      record "engine/restored-state-$mode" pass 0 "device back at step 3 ($got)"
    else
      record "engine/restored-state-$mode" fail 0 "expected checksum $sum3 at step 3, got: $got"
    fi
    app_cmd step || true  # so the next restore has something to undo
  done
  app_stop
}
engine_checks

section process
process_checks() {  # whole-process (CRIU) checkpoint, kill, restore
  local out sum2 img=$work/pimg pid t0
  if [[ -n "$phos_skip" ]] || out_of_time; then skip process/checkpoint "${phos_skip:-$(why_skipped)}"; return 0; fi
  if [[ ! -x "$b/criu/criu" ]]; then skip process/checkpoint "skipped: the bundle carries no criu"; return 0; fi
  want=("Looks good")
  check criu/check 60 0 -- "$b/criu/criu" check
  "$b/criu/criu" check --feature mem_dirty_track >"$logs/criu-mem_dirty_track.log" 2>&1 &&
    record criu/mem_dirty_track info 0 "soft-dirty tracking: yes ($(tail -1 "$logs/criu-mem_dirty_track.log"))" ||
    record criu/mem_dirty_track info 0 "soft-dirty tracking: no ($(tail -1 "$logs/criu-mem_dirty_track.log" | cut -c1-120))"
  t0=$(now)
  if ! app_start process; then record process/app-start fail "$(elapsed "$t0" "$(now)")" "checkpoint_app did not start"; app_stop; return 0; fi
  app_cmd step || true; app_cmd step || true; out=$app_out
  sum2=$(field checksum "$out")
  want=("checkpoint OK: $img")
  check process/checkpoint 180 0 -- "$phos" --socket "$sock" checkpoint --pid "$app_pid" --out "$img" --kill
  wait "$app_runner" 2>/dev/null || true; app_runner=""
  if [[ ! -f "$img/criu/inventory.img" ]]; then skip process/restore "skipped: no image (its checkpoint failed)"; return 0; fi
  want=("restored pid ")
  check process/restore 180 0 -- "$phos" --socket "$sock" restore "$img" --detach
  grep -q $'^process/restore\tpass' "$results" || return 0  # a failed restore leaves nobody to answer
  pid=$(sed -n 's/.*restored pid \([0-9]*\).*/\1/p' "$logs/process/restore.log" | head -1)
  [[ -n "$pid" ]] || return 0
  app_cmd print || true; out=$app_out
  if [[ "$(field checksum "$out") $(field verify-step "$out") $(field steps "$out")" == "$sum2 2 2" ]]; then
    record process/restored-state pass 0 "restored pid $pid answers at step 2 (checksum $sum2)"
  else
    record process/restored-state fail 0 "expected checksum $sum2 at step 2, got: $(tr '\n' ' ' <<<"$out" | cut -c1-160)"
  fi
  app_cmd step || true; out=$app_out
  [[ "$(field steps "$out")" == 3 ]] && record process/continues pass 0 "$(head -1 <<<"$out")" ||
    record process/continues fail 0 "after restore: $(tr '\n' ' ' <<<"$out" | cut -c1-160)"
  app_cmd quit || kill "$pid" 2>/dev/null || true
}
process_checks

process_app_checks() {  # whole-process checkpoint of a tests/apps program paused mid-work, kill, restore
  local a=multi_stream img=$work/pimg-ms pause=$work/pause pid t0 ref got
  if [[ -n "$phos_skip" ]] || out_of_time || [[ ! -x "$b/criu/criu" ]]; then skip process/$a "${phos_skip:-$(why_skipped) (or no criu)}"; return 0; fi
  mkdir -p "$logs/process"
  : >"$pause"
  PHOS_APP_PAUSE=$pause "$phos" --socket "$sock" run --lib "$lib" --name ms -- "$b/apps/$a" >"$logs/process/$a.out" 2>"$logs/process/$a.err" </dev/null &
  local runner=$!
  for _ in $(seq 600); do grep -q "paused at midpoint" "$logs/process/$a.err" && break; kill -0 $runner 2>/dev/null || break; sleep 0.1; done
  if ! grep -q "paused at midpoint" "$logs/process/$a.err"; then record process/$a-start fail 0 "$a did not reach its midpoint: $(tail -1 "$logs/process/$a.err")"; rm -f "$pause"; return 0; fi
  want=("checkpoint OK: $img")
  check process/$a-checkpoint 180 0 -- "$phos" --socket "$sock" checkpoint ms --out "$img" --kill
  wait $runner 2>/dev/null || true
  [[ -f "$img/criu/inventory.img" ]] || { rm -f "$pause"; return 0; }
  want=("restored pid ")
  check process/$a-restore 180 0 -- "$phos" --socket "$sock" restore "$img" --detach
  pid=$(sed -n 's/.*restored pid \([0-9]*\).*/\1/p' "$logs/process/$a-restore.log" | head -1)
  rm -f "$pause"
  [[ -n "$pid" ]] || return 0
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ref=$(grep -E "^$a: checksum" "$logs/apps/$a/native.log" 2>/dev/null || true)
  # No native run on the sim: the uninterrupted run under phos is the reference.
  [[ -n "$ref" || $backend != sim ]] || ref=$(grep -E "^$a: checksum" "$logs/apps/$a/phos.log" 2>/dev/null || true)
  got=$(grep -E "^$a: checksum" "$logs/process/$a.out" || true)
  if [[ -n "$ref" && "$ref" == "$got" ]]; then record process/$a-finishes-right pass 0 "restored pid $pid printed the native checksum: $got"
  else record process/$a-finishes-right fail 0 "native '$ref' vs restored '$got' ($(tail -1 "$logs/process/$a.err" | cut -c1-100))"; fi
}
process_app_checks

# ---- 4b. tests/bench programs: native vs phos run --------------------------------
section bench
# Measurements, not pass/fail on speed: each program must run (check rows);
# its numbers become info rows (docs/benchmarks.md quotes them). Before the
# programs that fault a kernel on purpose, so the GPU is still phosd's.
bench_value() {  # bench_value LOG KEY: the number after KEY= (sgemm lines) or after "KEY " (remoting lines)
  { sed -n "s/.*$2[= ]\([0-9.]*\).*/\1/p" "$1" 2>/dev/null || true; } | head -1
}
bench_checks() {
  local d=$b/bench nl pl n nat ph key unit max_n=4096
  if out_of_time; then skip bench "$(why_skipped)"; return 0; fi
  [[ $backend == cuda ]] || max_n=512  # the sim's GEMM runs on one CPU core
  if [[ -x $d/cublas_bench ]]; then
    # cublasSgemm 64..4096 (issue: under phos >= 0.95x native at n >= 1024).
    want=("posted_calls_per_s=")
    if [[ $backend == cuda ]]; then check bench/cublas/native 120 0 -- "$d/cublas_bench" 5 "$max_n" --no-host
    else skip bench/cublas/native "skipped: backend=sim (a native run needs a GPU)"; want=(); fi
    want=("posted_calls_per_s=")
    check bench/cublas/phos 180 0 -- "${phos_run[@]}" "$d/cublas_bench" 5 "$max_n" --no-host
    nl=$logs/bench/cublas/native.log pl=$logs/bench/cublas/phos.log
    for n in 64 256 512 1024 2048 4096; do
      nat=$( (grep "^sgemm n=$n " "$nl" 2>/dev/null || true) | sed -n 's/.*phos_us=\([0-9.]*\).*/\1/p')
      ph=$( (grep "^sgemm n=$n " "$pl" 2>/dev/null || true) | sed -n 's/.*phos_us=\([0-9.]*\).*/\1/p')
      [[ -n "$ph" ]] || continue
      record "bench/cublas/sgemm-$n" info 0 "$(awk -v a="${nat:-0}" -v b="$ph" 'BEGIN { if (a > 0) printf "native %.1f us, phos %.1f us: phos at %.3fx native speed", a, b, a / b; else printf "phos %.1f us (no native run)", b }')"
    done
    nat=$(bench_value "$nl" posted_calls_per_s) ph=$(bench_value "$pl" posted_calls_per_s)
    if [[ -n "$ph" ]]; then record bench/cublas/posted-8x8 info 0 "8x8x8 sgemm issue to completion: native ${nat:-none}/s, phos $ph/s"; fi
  else
    skip bench/cublas "skipped: the bundle carries no cublas_bench (PHOS_BUILD_BENCHMARKS=OFF)"
  fi
  if [[ -x $d/remoting_bench ]]; then
    # Launch rate, round trips, pageable and pinned copies (issue 19's "D2H
    # and H2D at the measured pinned bandwidth").
    want=("h2d_pinned ")
    if [[ $backend == cuda ]]; then check bench/remoting/native 120 0 -- "$d/remoting_bench"
    else skip bench/remoting/native "skipped: backend=sim (a native run needs a GPU)"; want=(); fi
    want=("h2d_pinned ")
    check bench/remoting/phos 180 0 -- "${phos_run[@]}" "$d/remoting_bench"
    nl=$logs/bench/remoting/native.log pl=$logs/bench/remoting/phos.log
    for key in launch_issue launch_e2e sync_call host_memcpy h2d_pageable d2h_pageable h2d_pinned d2h_pinned; do
      nat=$(bench_value "$nl" "$key") ph=$(bench_value "$pl" "$key")
      [[ -n "$ph" ]] || continue
      unit=$( (grep -m1 "^$key " "$pl" || true) | awk '{ print $3 }')
      record "bench/remoting/$key" info 0 "native ${nat:-none} $unit, phos $ph $unit$(awk -v a="${nat:-0}" -v b="$ph" 'BEGIN { if (a > 0) printf " (phos/native %.3f)", b / a }')"
    done
  else
    skip bench/remoting "skipped: the bundle carries no remoting_bench (PHOS_BUILD_BENCHMARKS=OFF)"
  fi
}
bench_checks

# ---- 5. tests/integration programs under phos run -------------------------------
section integration
# The expectations of tests/integration/integration_apps_test.cc, which runs
# the same programs against the sim backend in CI.
# The same programs natively first, as information (their expectations are
# phos's: unsupported_api and the fork checks print phos's messages): a
# program that hangs natively too is the program's problem, not phos's.
# runtime_more spins kernels that wait for each other: run it with the
# driver's default (lazy) module loading and with eager loading, which
# phosd uses (docs/backends.md "Module loading").
native_info() {  # native_info NAME ENV... -- PROGRAM ARGS...
  local name=$1 env=() rc=0 t0 t1 log; shift
  while [[ $1 != -- ]]; do env+=("$1"); shift; done; shift
  if [[ -n "$no_gpu_reason" || $backend == sim ]] || out_of_time; then return 0; fi
  log=$logs/native/$name.log; mkdir -p "$logs/native"
  t0=$(now)
  env "${env[@]}" timeout -k 5 "$(clip_limit 30)" "$@" >"$log" 2>&1 </dev/null || rc=$?
  t1=$(now)
  record "native/$name" info "$(elapsed "$t0" "$t1")" "exit $rc$([[ $rc == 124 || $rc == 137 ]] && echo ' (timed out)'); last line: $(tail -1 "$log" | cut -c1-120)"
}
native_info runtime_api -- "$i/runtime_api"
native_info runtime_more_lazy CUDA_MODULE_LOADING=LAZY -- "$i/runtime_more"
native_info runtime_more_eager CUDA_MODULE_LOADING=EAGER -- "$i/runtime_more"
native_info runtime_more_ptds_lazy CUDA_MODULE_LOADING=LAZY -- "$i/runtime_more_ptds"
native_info error_paths -- "$i/error_paths" errors
native_info symbols -- "$i/symbols"
native_info graphs -- "$i/graphs"
# The driver's virtual-memory API natively: checks the program's CUDA
# expectations (errors, granularity) against the real driver; phos's own
# refusals show as failures here (it expects NOT_SUPPORTED where CUDA works).
native_info vmm -- "$i/vmm"
# The texture test against the GPU's own filtering (the CPU reference is
# the one the sim is checked against).
native_info textures -- "$i/textures"
native_info cublas -- "$i/cublas"
# NCCL: one rank (NCCL refuses two ranks on one GPU) of the data-parallel
# loop (GEMM, all-reduce, a split communicator every 10 steps), natively
# and under phos, where phosd runs the collectives with its own NCCL
# (docs/backends.md "Collectives on the cuda backend"; first run here).
if [[ -x "$i/nccl_ranks" ]]; then
  native_info nccl_train_one_rank -- "$i/nccl_ranks" train 0 1 "$work/nccl-native.id"
  want=("rank 0: trained checksum" "OK")
  check integration/nccl_train_one_rank 180 0 -- "${phos_run[@]}" "$i/nccl_ranks" train 0 1 "$work/nccl-phos.id"
  if [[ -f "$logs/native/nccl_train_one_rank.log" && -f "$logs/integration/nccl_train_one_rank.log" ]]; then
    a=$(grep -o 'trained checksum [^ ]*' "$logs/native/nccl_train_one_rank.log" || true)
    p=$(grep -o 'trained checksum [^ ]*' "$logs/integration/nccl_train_one_rank.log" || true)
    if [[ -n "$a" && "$a" == "$p" ]]; then record integration/nccl_train_one_rank/same-checksum pass 0 "$a"
    else record integration/nccl_train_one_rank/same-checksum fail 0 "native '$a' vs phos '$p'"; fi
  fi
else
  skip integration/nccl_train_one_rank "skipped: the bundle carries no nccl_ranks"
fi
# runtime_api and driver_api try a cooperative launch on purpose: phos
# refuses that one by name (integration_apps_test.cc counts it), nothing else.
want=("runtime_api: OK")
check integration/runtime_api 120 0 -- "${phos_run[@]}" "$i/runtime_api"
want=("host_memory: OK")
check integration/host_memory 60 0 -- "${phos_run[@]}" "$i/host_memory"
want=("driver_api: kernels from PTX text" "driver_api: kernels from a fatbin file" "driver_api: OK")
check integration/driver_api 60 0 -- "${phos_run[@]}" "$i/driver_api" "$i/driver_kernels.fatbin" "$i/driver_kernels.sm80.fatbin"
want=("driver_api: runtime first OK")
check integration/driver_api_runtime_first 120 0 -- "${phos_run[@]}" "$i/driver_api" --runtime-first
want=("fork-before child rc=0" "runtime_more: fork-before OK") wantnot=("cannot be used in a child")
check integration/runtime_more_fork_before 60 0 -- "${phos_run[@]}" "$i/runtime_more" fork-before
want=("symbols: OK")
check integration/symbols 120 0 -- "${phos_run[@]}" "$i/symbols"
# CUDA graphs, host functions and stream-ordered allocation (runtime_more
# also has the latter two; it runs last, below).
want=("graphs: OK") wantnot=("not supported by phos")
check integration/graphs 120 0 -- "${phos_run[@]}" "$i/graphs"
# The driver's virtual-memory API on the cuda backend (ReserveAddressRange
# and mappings inside it: written to the driver's documented behaviour,
# first run here).
want=("vmm: OK")
check integration/vmm 120 0 -- "${phos_run[@]}" "$i/vmm"
# CUDA arrays, textures and surfaces: the cuda backend makes textures of
# linear and pitched memory (2D arrays included) but refuses surfaces and
# 3D/layered textures by name, so under phos this is expected to pass the
# 2D/linear/pitched steps and stop at the 3D one (cudaErrorNotSupported);
# recorded, not hidden.
want=("textures: OK") wantnot=("not supported by phos")
check integration/textures 120 0 -- "${phos_run[@]}" "$i/textures"
# cuBLAS in phosd on the pooled handle (docs/interposer.md "cuBLAS").
want=("cublas: OK") wantnot=("not supported by phos")
check integration/cublas 120 0 -- "${phos_run[@]}" "$i/cublas"
want=("unsupported_api: 801 801" "unsupported_api: ipc 801 801" "unsupported_api: OK") once=("phos: cudaMallocManaged: managed memory is not offered by phos" "phos: cudaIpcGetEventHandle is not supported by phos yet")
check integration/unsupported_api 120 0 -- "${phos_run[@]}" "$i/unsupported_api"
want=("dlopen_driver: 1 " " OK")
check integration/dlopen_driver 120 0 -- "${phos_run[@]}" "$i/dlopen_driver"
# A statically linked CUDA runtime runs too: libphos serves the private
# export tables it asks the driver for (docs/interposer.md "Export tables").
want=("vector_add: checksum 0x" " OK") wantnot=("not supported by phos")
check integration/static_cudart_runs 60 0 -- "${phos_run[@]}" "$i/vector_add_static"
# Last, the programs that fault a kernel on purpose (runtime_more's
# DeviceReset case, error_paths). On a GPU a kernel fault is sticky for the
# whole process that owns the context — phosd, for every app — so phosd is
# restarted after each runtime_more (docs/gpu-report.md).
for p in runtime_more runtime_more_ptds; do
  want=("$p: OK" "done rc=0") wantnot=("not supported by phos")
  once=("phos: CUDA cannot be used in a child forked after CUDA was initialised (pid ")
  check "integration/$p" 60 0 -- "${phos_run[@]}" "$i/$p"
  restart_daemon "after integration/$p"
done
want=("error_paths: OK")
check integration/error_paths 120 0 -- "${phos_run[@]}" "$i/error_paths" errors
# On a GPU that fault ended CUDA for phosd: phosd says so (ProcessHealth,
# docs/backends.md "A kernel fault is the whole process's"), and only a
# restart brings the GPU back.
if [[ $backend == cuda ]]; then
  want=("GPU LOST" "restart phosd")
  check phosd/reports-gpu-lost 30 0 -- "$phos" --socket "$sock" status
  restart_daemon "after integration/error_paths (a kernel fault ends CUDA for phosd's process)"
fi
# After all that (error_paths faulted on purpose; on a GPU, phosd restarted)
# phosd serves apps.
want=("vector_add: checksum 0x" " OK")
check integration/daemon_still_serves 120 0 -- "${phos_run[@]}" "$b/apps/vector_add"


# phosd survived every check above and stops cleanly on SIGTERM.
if [[ -z "$phos_skip" ]]; then
  if kill -0 "$daemon_pid" 2>/dev/null; then record phosd/alive-at-end pass 0 "still running after every check"
  else record phosd/alive-at-end fail 0 "phosd exited during the checks (logs/phosd.log: $(tail -1 "$logs/phosd.log" | cut -c1-120))"; fi
  t0=$(now) pid=$daemon_pid
  stop_daemon
  t1=$(now)
  if grep -q 'did not stop on SIGTERM' "$logs/phosd.log"; then record phosd/stop fail "$(elapsed "$t0" "$t1")" "pid $pid did not stop on SIGTERM within 15 s"
  else record phosd/stop pass "$(elapsed "$t0" "$t1")" "stopped on SIGTERM"; fi
fi

# ---- report ----------------------------------------------------------------------
run_secs=$(elapsed "$run_started" "$(now)")
tar -C "$work" -czf "$report/logs.tar.gz" logs
python3 - "$results" "$report" "$backend" "$gpu_name" "$driver" "$cuda_version" "$git_rev" "$cxx_runtime" \
  "$run_secs" "$(uname -srm)" <<'PY'
import json, sys, datetime
results, report, backend, gpu, driver, cuda, rev, cxx, secs, kernel = sys.argv[1:]
rows = []
for line in open(results):
    name, result, s, reason = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
    rows.append({"check": name, "result": result, "seconds": float(s), "reason": reason})
counts = {k: sum(r["result"] == k for r in rows) for k in ("pass", "fail", "skip")}
env = {"backend": backend, "gpu": gpu, "driver": driver, "cuda_version": cuda, "git_rev": rev,
       "cxx_runtime": cxx, "kernel": kernel,
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "total_seconds": round(float(secs), 2)}
json.dump({"environment": env, "summary": counts, "checks": rows}, open(f"{report}/report.json", "w"), indent=2)
w = max([len(r["check"]) for r in rows] + [5])
with open(f"{report}/report.txt", "w") as f:
    f.write("phos GPU checks\n")
    for k, v in env.items():
        f.write(f"  {k:13} {v}\n")
    f.write(f"\n{'check':{w}}  result  seconds  reason\n")
    for r in rows:
        f.write(f"{r['check']:{w}}  {r['result']:6}  {r['seconds']:7.2f}  {r['reason']}\n")
    f.write(f"\n{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped "
            f"(logs: logs.tar.gz)\n")
PY
cat "$report/report.txt"
if grep -q $'\tfail\t' "$results"; then exit 1; fi
exit 0
