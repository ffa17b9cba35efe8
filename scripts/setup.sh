#!/usr/bin/env bash
# scripts/setup.sh — install everything phos needs on a fresh Debian 12 machine.
#
# Idempotent: run it as often as you like; it installs only what is missing
# and prints what it did. Needs root (or sudo) for apt-get.
#
#   scripts/setup.sh            install dependencies
#   scripts/setup.sh --check    only report what is missing (exit 1 if anything is)
#
# Why CRIU comes from trixie: Debian 12's CRIU 3.17 fails `criu check` on the
# vDSO of the kernels we run on; CRIU >= 4.0 handles it. We add trixie with a
# low apt pin (priority 100) so that nothing else is upgraded from it unless
# we ask for it by name.
set -euo pipefail

CHECK_ONLY=0
[[ "${1:-}" == "--check" ]] && CHECK_ONLY=1

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: run this script as root"
  SUDO="sudo"
fi

# Debian 12 (bookworm) packages. One line per dependency and what it is for.
BOOKWORM_PKGS=(
  build-essential cmake ninja-build pkg-config git
  lld                                                                     # links ~8x faster than GNU ld (CMakeLists.txt)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # control plane, image metadata
  libspdlog-dev libfmt-dev                                                # logs
  libcli11-dev                                                            # commands
  liburing-dev                                                            # image I/O
  libxxhash-dev                                                           # checksums
  libclang-14-dev clang-14 llvm-14-dev libclang-rt-14-dev                 # signatures, API generation, fuzzers
  libzstd-dev liblz4-dev                                                  # compressed fatbin entries
  libopenblas-dev                                                         # cuBLAS on the sim backend (OpenBLAS cblas)
  libgtest-dev libgmock-dev libbenchmark-dev                              # tests, benchmarks
  python3 procps                                                          # test helpers
  python3-grpcio python3-protobuf python3-venv                            # Python SDK (cli/python), its PyPI venv
  etcd-server                                                             # jobs across phosds (--etcd); cluster_test starts one
)
TRIXIE_PKGS=(criu libcriu-dev)

missing_pkgs() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

export DEBIAN_FRONTEND=noninteractive

# ---- 1. bookworm packages -------------------------------------------------
mapfile -t MISSING < <(missing_pkgs "${BOOKWORM_PKGS[@]}")
if ((${#MISSING[@]})); then
  ((CHECK_ONLY)) && { say "missing: ${MISSING[*]}"; exit 1; }
  say "installing from Debian 12: ${MISSING[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null
else
  say "Debian 12 packages: all present"
fi

# ---- 2. CRIU >= 4.0 from trixie, pinned low -------------------------------
criu_version() { criu --version 2>/dev/null | sed -n 's/^Version: *//p' | head -1; }
criu_ok() {
  local v; v=$(criu_version)
  [[ -n "$v" ]] && dpkg --compare-versions "$v" ge 4.0 && \
    [[ -z "$(missing_pkgs libcriu-dev)" ]]
}
if criu_ok; then
  say "CRIU $(criu_version) and libcriu-dev: present"
else
  ((CHECK_ONLY)) && { say "missing: CRIU >= 4.0 / libcriu-dev (from trixie)"; exit 1; }
  if [[ ! -f /etc/apt/sources.list.d/phos-trixie.sources ]]; then
    say "adding Debian trixie as an apt source pinned at priority 100 (only for CRIU)"
    $SUDO tee /etc/apt/sources.list.d/phos-trixie.sources >/dev/null <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    $SUDO tee /etc/apt/preferences.d/phos-trixie >/dev/null <<'EOF'
# phos: take packages from trixie only when asked for by name (CRIU >= 4.0).
Package: *
Pin: release n=trixie
Pin-Priority: 100
EOF
  fi
  $SUDO apt-get update -qq
  say "installing from trixie: ${TRIXIE_PKGS[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends -t trixie "${TRIXIE_PKGS[@]}" >/dev/null
  criu_ok || die "CRIU >= 4.0 still not installed (criu --version says '$(criu_version)')"
  say "CRIU $(criu_version) installed"
fi

# ---- 2b. fio (optional: the image-write benchmark's baseline) ------------
# Optional because trixie's CRIU pulls trixie's libnl-3 while bookworm's fio
# wants bookworm's libnl-route-3; apt resolves it by taking libnl-route-3
# from trixie too. If that ever fails, only the benchmark loses its fio
# baseline (it still compares with dd).
if [[ -n "$(missing_pkgs fio)" ]] && ((!CHECK_ONLY)); then
  if $SUDO apt-get install -y -qq --no-install-recommends fio >/dev/null 2>&1 ||
     $SUDO apt-get install -y -qq --no-install-recommends fio libnl-route-3-200/trixie >/dev/null 2>&1; then
    say "fio installed (benchmark baseline)"
  else
    say "fio: could not be installed (optional; tests/bench/image_write_compare.sh then compares with dd only)"
  fi
fi

# ---- 2c/2d. venvs from PyPI ------------------------------------------------
# pip_venv LABEL DIR REQS IMPORTS VERSIONS [PIP_ARGS...]: makes the venv DIR
# holding REQS (one requirement a line) unless it is there already with
# exactly those requirements (recorded in DIR/phos-requirements.txt) and
# python can run IMPORTS; VERSIONS is python code printing what it holds.
# Made once from PyPI (network needed once), again when REQS change.
pip_venv() {
  local label=$1 dir=$2 want=$3 imports=$4 versions=$5
  shift 5
  local -a reqs
  venv_ok() {
    "$dir/bin/python" -c "$imports" 2>/dev/null &&
      [[ "$(cat "$dir/phos-requirements.txt" 2>/dev/null)" == "$want" ]]
  }
  if venv_ok; then
    say "$label $dir: present ($("$dir/bin/python" -c "$versions"))"
    return
  fi
  ((CHECK_ONLY)) && { say "missing: the $label $dir"; exit 1; }
  say "making the $label $dir from PyPI: ${want//$'\n'/ }"
  $SUDO mkdir -p "$(dirname "$dir")"
  [[ -x "$dir/bin/python" ]] || $SUDO /usr/bin/python3 -m venv "$dir"
  mapfile -t reqs <<<"$want"
  $SUDO "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" "${reqs[@]}" ||
    die "could not install into $dir from PyPI (pip above says why; the venv needs network access once)"
  printf '%s\n' "$want" | $SUDO tee "$dir/phos-requirements.txt" >/dev/null
  venv_ok || die "the $label $dir is still not usable"
  say "$label $dir: $("$dir/bin/python" -c "$versions")"
}

# 2c. The Python SDK's tests run twice: with Debian's python3-grpcio /
# python3-protobuf, and (ctest's python_sdk_venv_*) installed by pip, as a
# user installs it, into this venv, which holds the newest grpcio and
# protobuf PyPI has within cli/python/pyproject.toml's bounds (and the
# packaging tools; not phos itself: the tests install it from the source
# tree). For PyPI's newest again: remove it and run this script.
# PHOS_SDK_VENV moves it (then also cmake -DPHOS_SDK_VENV=).
SDK_PYPROJECT="$(cd "$(dirname "$0")/.." && pwd)/cli/python/pyproject.toml"
pip_venv "Python SDK venv" "${PHOS_SDK_VENV:-/opt/phos/sdk-venv}" \
  "$(/usr/bin/python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$SDK_PYPROJECT")" \
  'import grpc, google.protobuf, setuptools, wheel' \
  'import grpc, google.protobuf as p; print("protobuf", p.__version__, "grpcio", grpc.__version__)' \
  --upgrade pip setuptools wheel

# 2d. tests/frameworks runs numba-cuda's and CuPy's kernels, unmodified,
# under `phos run` on the sim (docs/compatibility.md), from a venv holding
# exactly the pins of tests/frameworks/requirements.txt.
# PHOS_FRAMEWORKS_VENV moves it (then also cmake -DPHOS_FRAMEWORKS_VENV=).
FW_REQS_FILE="$(cd "$(dirname "$0")/.." && pwd)/tests/frameworks/requirements.txt"
pip_venv "GPU frameworks venv (numba-cuda, CuPy)" "${PHOS_FRAMEWORKS_VENV:-/opt/phos/frameworks-venv}" \
  "$(grep -v '^#' "$FW_REQS_FILE" | sed '/^$/d')" \
  'import numpy, numba.cuda, cuda.bindings, cupy' \
  'import importlib.metadata as m; print(" ".join(p + " " + m.version(p) for p in ("numba-cuda", "numba", "cupy-cuda13x", "cuda-bindings", "numpy")))'

# 2e. Another release of the CUDA runtime, for the test that a program
# linked with its static runtime (libcudart_static.a) runs over phos's driver
# API (tests/integration "StaticRuntime13_2"): PyPI's nvidia-cuda-runtime
# wheel holds it. PHOS_CUDART_13_2_VENV moves it (then also cmake
# -DPHOS_CUDART_13_2_VENV=).
pip_venv "CUDA runtime 13.2 (static library)" "${PHOS_CUDART_13_2_VENV:-/opt/phos/cudart-13.2-venv}" \
  "nvidia-cuda-runtime==13.2.86" \
  'import glob, sys; sys.exit(not glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/cu13/lib/libcudart_static.a"))' \
  'import importlib.metadata as m; print("nvidia-cuda-runtime", m.version("nvidia-cuda-runtime"))'

# ---- 3. CUDA toolkit (checked, not installed: it is large) ----------------
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cuda_missing=()
command -v nvcc >/dev/null || [[ -x "$CUDA_HOME/bin/nvcc" ]] || cuda_missing+=(nvcc)
[[ -f "$CUDA_HOME/include/cuda.h" ]] || cuda_missing+=(cuda.h)
[[ -f "$CUDA_HOME/include/cuda_runtime_api.h" ]] || cuda_missing+=(cuda_runtime_api.h)
if ((${#cuda_missing[@]})); then
  cat >&2 <<EOF
setup: the CUDA toolkit is missing (${cuda_missing[*]} not found under $CUDA_HOME).
setup: install it from PyPI, all pinned to the same 13.0 release:
         pip install 'nvidia-cuda-nvcc==13.0.*' 'nvidia-nvvm==13.0.*' \\
                     'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*'
       then point CUDA_HOME at the folder holding bin/nvcc and include/cuda.h
       (an unpinned nvvm emits PTX that ptxas 13.0 rejects).
EOF
  exit 1
fi
# NCCL's header (libphos.so exports nccl.h's functions: phos_api_gen parses
# it) and library (tests/integration's nccl_ranks links -lnccl as users do).
if [[ ! -f "$CUDA_HOME/include/nccl.h" ]] || ! compgen -G "$CUDA_HOME/lib64/libnccl.so*" >/dev/null; then
  cat >&2 <<EOF2
setup: NCCL is missing (nccl.h under $CUDA_HOME/include, libnccl.so under $CUDA_HOME/lib64).
setup: PyPI's nvidia-nccl-cu13 carries both (include/nccl.h, lib/libnccl.so.2):
         pip install nvidia-nccl-cu13
       then copy or link them into $CUDA_HOME/include and $CUDA_HOME/lib64
       (with libnccl.so -> libnccl.so.2).
EOF2
  exit 1
fi
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
say "CUDA toolkit: $("$NVCC" --version | tail -1) at $CUDA_HOME"
say "done"
