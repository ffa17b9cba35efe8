#!/usr/bin/env bash
# Builds the GPU-check bundle: everything tests/gpu/run.sh needs on a GPU
# machine that has the NVIDIA driver and CUDA toolkit but no network and
# maybe another Linux distribution (so: no Debian packages).
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, gpu-bundle)
#
# OUT_DIR (git-ignored) holds:
#   payload.tar.xz  bin/ apps/ integration/ bench/ lib/ criu/ (see MANIFEST.txt)
#   MANIFEST.txt    git revision, build type, every file with its size and role
#   run.sh, README.md   copies of tests/gpu/run.sh and tests/gpu/README.md
#
# Why one xz archive instead of plain folders: phos and phosd link libclang
# (kernel signature parsing), which drags in libLLVM, libz3 and ICU — about
# 200 MB stripped. The device tool moves at most 64 MiB (working tree
# included), and xz brings the whole bundle to ~53 MB; python3's tarfile
# unpacks it where xz is missing (run.sh does that).
#
# Environment:
#   PHOS_BUILD_WRAPPER  command that builds targets instead of
#                       `cmake --build BUILD_DIR --target` (e.g. a lock wrapper)
#   PHOS_BUNDLE_NO_BUILD=1  package what is built, build nothing
#   PHOS_BUNDLE_BUDGET_MB   size limit of OUT_DIR in MiB (default: 62 minus
#                           the working tree that travels with it)
#   PHOS_BUNDLE_XZ_LEVEL    xz preset (default 9e)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${1:-build}
out=${2:-gpu-bundle}
# The device tool moves at most 64 MiB: the working tree (tracked and
# untracked-not-ignored files) plus the carried bundle. Keep 2 MiB spare.
tree_bytes=$( (git ls-files -z --cached --others --exclude-standard 2>/dev/null || true) |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
budget_mb=${PHOS_BUNDLE_BUDGET_MB:-$(( 62 - tree_bytes / 1048576 ))}
xz_level=${PHOS_BUNDLE_XZ_LEVEL:-9e}

die() { echo "gpu-bundle: error: $*" >&2; exit 1; }
[[ -f "$build/CMakeCache.txt" ]] || die "$build is not a configured build directory (run: cmake -S . -B $build -G Ninja)"
command -v xz >/dev/null || die "xz is needed to pack the bundle (apt-get install xz-utils)"
for t in ldd strip python3 ctest; do command -v "$t" >/dev/null || die "$t is needed"; done

# The gpu-labelled gtest binaries, from ctest itself so a new gpu test is
# bundled without editing this script. The ctest name is the target name
# (phos_add_gtest), the command's first word the binary.
mapfile -t gpu_tests < <(ctest --test-dir "$build" -L gpu --show-only=json-v1 |
  python3 -c 'import json,sys
for t in json.load(sys.stdin)["tests"]: print(t["name"] + "\t" + t["command"][0])')
[[ ${#gpu_tests[@]} -gt 0 ]] || die "ctest lists no test labelled gpu in $build"

# The CUDA programs run/compared by run.sh (tests/apps and
# tests/integration/CMakeLists.txt build them with nvcc -cudart shared).
apps=(vector_add saxpy_loop reduce_shared struct_of_pointers pointer_table multi_stream)
integration=(runtime_api host_memory driver_api runtime_more runtime_more_ptds graphs vmm textures cublas error_paths symbols
  unsupported_api daemon_loss dlopen_driver vector_add_static checkpoint_app nccl_ranks)
# driver_api reads the fatbin file (argument); .cubin/.ptx for later checks.
integration_data=(driver_kernels.fatbin driver_kernels.sm80.fatbin driver_kernels.cubin driver_kernels.ptx)
# tests/bench CUDA programs run.sh times natively and under phos run (built
# with -DPHOS_BUILD_BENCHMARKS=ON, the default; left out when absent).
bench=(cublas_bench remoting_bench)

targets=(phos phosd phos_client phos_test_apps phos_integration_programs phos_checkpoint_app phos_export_trace)
for t in "${gpu_tests[@]}"; do targets+=("${t%%$'\t'*}"); done
grep -q '^PHOS_BUILD_BENCHMARKS:BOOL=ON' "$build/CMakeCache.txt" && targets+=(cublas_bench_program remoting_bench_program)
if [[ "${PHOS_BUNDLE_NO_BUILD:-0}" != 1 ]]; then
  # Re-configure first: the version phosd prints (and a report quotes) is
  # the git revision read when CMake configures (CMakeLists.txt).
  cmake "$build" >/dev/null
  echo "gpu-bundle: building ${targets[*]}"
  if [[ -n "${PHOS_BUILD_WRAPPER:-}" ]]; then
    # shellcheck disable=SC2086  # the wrapper may be a command with arguments
    $PHOS_BUILD_WRAPPER "${targets[@]}"
  else
    cmake --build "$build" --target "${targets[@]}"
  fi
fi

stage=$(mktemp -d /tmp/phos-gpu-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,apps,integration,bench,lib,criu/lib}

need() { [[ -f "$1" ]] || die "$1 is missing (did the build of its target fail?)"; }
put() {  # put SRC DESTDIR: copy, following links
  need "$1"
  cp -L "$1" "$2/"
}
put "$build/cli/phos" "$stage/bin"
put "$build/daemon/phosd" "$stage/bin"
put "$build/interposer/client/libphos.so" "$stage/lib"
put "$build/interposer/jit/libphos-nvjitlink.so" "$stage/lib"
put "$build/interposer/jit/libphos-nvrtc.so" "$stage/lib"
put "$build/tests/gpu/libphos_export_trace.so" "$stage/lib"  # run.sh's "trace" section
for t in "${gpu_tests[@]}"; do put "${t#*$'\t'}" "$stage/bin"; done
for a in "${apps[@]}"; do put "$build/tests/apps/$a" "$stage/apps"; done
for p in "${integration[@]}" "${integration_data[@]}"; do put "$build/tests/integration/$p" "$stage/integration"; done
for p in "${bench[@]}"; do [[ -f "$build/tests/bench/$p" ]] && put "$build/tests/bench/$p" "$stage/bench"; done

# Shared libraries the GPU machine may lack: everything ldd resolves except
# glibc itself (must be the machine's own, it pairs with its ld.so) and the
# NVIDIA driver/runtime (must match the machine's driver). NCCL (218 MB)
# stays too: run.sh finds PyTorch's. libstdc++ and
# libgcc_s do travel, in lib/compat: run.sh uses them only when the
# machine's libstdc++ is older than ours.
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libutil|libresolv|libanl|libnsl|libBrokenLocale|libthread_db|libcuda\.|libcudart|libnvidia|libcublas|libnvrtc|libnvJitLink|libnccl)'
collect_libs() {  # collect_libs DEST ELF...: copy the non-system libraries the ELFs load
  local dest=$1; shift
  local name path
  while read -r name path; do
    [[ "$name" =~ $skip_re ]] && continue
    [[ "$path" == /* ]] || die "ldd cannot resolve $name (needed by one of: $*)"
    case "$name" in
      libstdc++.so*|libgcc_s.so*) mkdir -p "$dest/compat"; cp -L "$path" "$dest/compat/$name" ;;
      *) cp -L "$path" "$dest/$name" ;;
    esac
  done < <(for f in "$@"; do ldd "$f" | awk '$2 == "=>" && $3 != "" {print $1, $3}'; done | sort -u)
}
# (driver_kernels.cubin is an ELF too, of the GPU: not for ldd.)
elfs() { for f in "$@"; do [[ "$f" != *.cubin ]] && [[ "$(head -c4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] && echo "$f"; done; true; }
mapfile -t all_elfs < <(elfs "$stage"/bin/* "$stage/lib/libphos.so" "$stage"/apps/* "$stage"/integration/* "$stage"/bench/*)
collect_libs "$stage/lib" "${all_elfs[@]}"
# CRIU 4.x (Debian's), for the engine's process checkpoints: not used by a
# check yet, carried so a later run.sh hook can.
criu_bin=$(command -v criu || true)
[[ -n "$criu_bin" ]] || criu_bin=/usr/sbin/criu
if [[ -x "$criu_bin" ]]; then
  cp -L "$criu_bin" "$stage/criu/criu"
  collect_libs "$stage/criu/lib" "$stage/criu/criu"
  rm -rf "$stage/criu/lib/compat"  # lib/compat serves criu as well
  # run.sh puts lib/ before criu/lib/ on the loader's path: a library both
  # need travels once.
  for f in "$stage"/criu/lib/*; do [[ -e "$stage/lib/${f##*/}" ]] && rm -f "$f"; done
else
  echo "gpu-bundle: warning: no criu here (apt-get install criu); the bundle has none" >&2
  rmdir "$stage/criu/lib" "$stage/criu"
fi

# Strip symbols and debug info (RelWithDebInfo binaries are ~80 MB). The
# CUDA programs stay unstripped: they are small, and libphos.so may look at
# their symbol tables.
find "$stage/bin" "$stage/lib" "$stage/criu" -type f -exec strip --strip-unneeded {} +

git_rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] || git_rev="$git_rev-dirty"
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
role() {
  case "$1" in
    bin/phos) echo "phos CLI (phos daemon execs bin/phosd; phos run preloads libphos.so)" ;;
    bin/phosd) echo "phosd daemon binary" ;;
    bin/*) echo "gtest binary labelled gpu" ;;
    apps/*) echo "tests/apps CUDA program (prints '<name>: checksum 0x... OK')" ;;
    integration/*.fatbin|integration/*.cubin|integration/*.ptx) echo "driver_api kernel image" ;;
    integration/*) echo "tests/integration CUDA program" ;;
    bench/*) echo "tests/bench CUDA program (timed natively and under phos run)" ;;
    lib/libphos.so) echo "interposer (LD_PRELOAD)" ;;
    lib/libphos-nvjitlink.so) echo "nvJitLink shim (LD_PRELOAD; keeps JIT-linked kernels' PTX)" ;;
    lib/libphos-nvrtc.so) echo "NVRTC shim (LD_PRELOAD; keeps NVRTC-compiled kernels' PTX)" ;;
    lib/compat/*) echo "C++ runtime, used when the machine's is older" ;;
    lib/*) echo "shared library of phos/phosd/tests" ;;
    criu/criu) echo "CRIU $("$criu_bin" --version 2>/dev/null | sed -n 's/^Version: //p') (not used by a check yet)" ;;
    criu/lib/*) echo "shared library of criu" ;;
    *) echo "" ;;
  esac
}
{
  echo "phos GPU bundle"
  echo "git_rev: $git_rev"
  echo "build_type: $build_type"
  # shellcheck disable=SC1091  # os-release is the running machine's
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") $(uname -m)"
  echo "gpu_tests: $(for t in "${gpu_tests[@]}"; do printf '%s ' "${t%%$'\t'*}"; done)"
  echo "apps: ${apps[*]}"
  echo "integration: ${integration[*]}"
  echo
  echo "files (in payload.tar.xz; bytes, path, role):"
  (cd "$stage" && find . -type f | sed 's|^\./||' | sort) | while read -r f; do
    printf '%10d  %-52s %s\n' "$(stat -c %s "$stage/$f")" "$f" "$(role "$f")"
  done
} >"$stage/MANIFEST.txt"

rm -rf "$out"
mkdir -p "$out"
echo "gpu-bundle: packing $(du -sh "$stage" | cut -f1) with xz -$xz_level (a few minutes)"
# One thread and a 256 MiB dictionary (one block: libLLVM and libclang share
# strings), and the x86 branch filter, which makes machine code compress
# ~5 % better: together 58 MB where plain -9 -T0 gave 62 (over the budget
# once phosd linked OpenBLAS). ~3 minutes on two cores; python3's lzma,
# run.sh's fallback, decodes both filters.
tar -C "$stage" -cf - . | xz -T1 --x86 "--lzma2=preset=$xz_level,dict=256MiB,nice=273" >"$out/payload.tar.xz"
cp "$stage/MANIFEST.txt" "$out/"
cp tests/gpu/run.sh tests/gpu/README.md "$out/"

size=$(du -sb "$out" | cut -f1)
if (( size > budget_mb * 1024 * 1024 )); then
  echo "gpu-bundle: error: $out is $((size / 1048576)) MiB, over the ${budget_mb} MiB budget" >&2
  echo "gpu-bundle: the biggest files before compression:" >&2
  (cd "$stage" && find . -type f -printf '%s %p\n' | sort -rn | head -15) >&2
  exit 1
fi
echo "gpu-bundle: $out is $((size / 1048576)) MiB (budget ${budget_mb} MiB: 62 MiB minus the $((tree_bytes / 1048576)) MiB working tree), revision $git_rev"
echo "gpu-bundle: run it on a GPU machine from the repo root: bash tests/gpu/run.sh $out REPORT_DIR"
