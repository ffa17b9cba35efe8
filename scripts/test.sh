#!/usr/bin/env bash
# scripts/test.sh — THE test command (README "Test", and .ci/run calls it).
#
#   1. installs missing dependencies (scripts/setup.sh, idempotent)
#   2. builds everything (RelWithDebInfo) and runs every `unit` test
#   3. rebuilds the `concurrency` tests under ThreadSanitizer and runs them
#   4. builds the `parser` tests and the libFuzzer targets with clang under
#      AddressSanitizer+UBSan, runs the tests, then each fuzzer briefly
# Steps 3 and 4 build in the background, at low priority, while step 2's
# tests run (they leave half the CPU idle).
# Any failure stops the script with a non-zero exit.
#
# Environment: PHOS_JOBS (parallel jobs, default nproc),
#              PHOS_SKIP_SANITIZERS=1 (steps 3-4 off, for quick local runs),
#              PHOS_FUZZ_SECONDS (per fuzzer, default 15).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${PHOS_JOBS:-$(nproc)}
FUZZ_SECONDS=${PHOS_FUZZ_SECONDS:-15}
# The builds of this script need line numbers in their reports (sanitizers,
# crashes), not full debug info: -g1 compiles and links them faster (CI
# stays under 30 min). scripts/demo.sh and a developer's own build keep
# the default RelWithDebInfo.
# The tests' own sources (harness, not what they test) compile at -O1:
# ~25% faster than -O2 (PHOS_TEST_CXX_FLAGS, tests/CMakeLists.txt).
BUILD_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DPHOS_TEST_CXX_FLAGS=-O1)
# The sanitizer builds compile at -O1 (what the TSan and ASan manuals
# suggest): ~10% less compile time than -O2, and their tests are not
# about speed; the tests' own sources at -O0 (~12% less again).
SANITIZED_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DPHOS_TEST_CXX_FLAGS=-O0)
# Each step says when it started (seconds since the script did): where CI's
# time goes is read off the log.
step() { printf '\n==== phos test: %s (at %d s) ====\n' "$*" "$((SECONDS - t0))"; }
t0=$SECONDS

step "dependencies"
bash scripts/setup.sh

step "build (RelWithDebInfo) in build/"
cmake -S . -B build -G Ninja -DPHOS_SANITIZER=none "${BUILD_FLAGS[@]}" >/dev/null
cmake --build build -j"$JOBS"

SANITIZERS=1
[[ "${PHOS_SKIP_SANITIZERS:-0}" == 1 ]] && SANITIZERS=0
if (( SANITIZERS )); then
  # The unit tests leave about half of the CPU idle (they wait on daemons,
  # sockets, CRIU; measured with vmstat: 45-70 % idle on 2 cores), so the
  # two sanitizer builds run in the background while they do, at low
  # priority: nice 10 for the TSan build, whose tests come first, nice 15
  # for the clang build. A test is never starved by a compile (the
  # scheduler gives a nice-0 thread ~10x a nice-10 one's share); the builds
  # take what the tests leave.
  #   build-tsan/: the `concurrency` tests under ThreadSanitizer.
  #   build-fuzz/: one clang AddressSanitizer+UBSan build serves both the
  #     parser tests and the fuzzers (a separate gcc ASan build of the same
  #     libraries cost CI ~5 minutes).
  cmake -S . -B build-tsan -G Ninja -DPHOS_SANITIZER=thread -DPHOS_BUILD_BENCHMARKS=OFF "${SANITIZED_FLAGS[@]}" >/dev/null
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DPHOS_FUZZ=ON \
    -DPHOS_SANITIZER=address -DPHOS_BUILD_BENCHMARKS=OFF -DPHOS_FUZZ_SECONDS="$FUZZ_SECONDS" "${SANITIZED_FLAGS[@]}" >/dev/null
  step "sanitizer builds start in the background (logs: build-tsan/phos-build.log, build-fuzz/phos-build.log)"
  # setsid: each build is a process group of its own, so the trap below
  # ends its compilers too, not only cmake.
  setsid -w nice -n 10 cmake --build build-tsan -j"$JOBS" --target tests_concurrency >build-tsan/phos-build.log 2>&1 &
  TSAN_BUILD=$!
  setsid -w nice -n 15 cmake --build build-fuzz -j"$JOBS" --target tests_parser tests_fuzz >build-fuzz/phos-build.log 2>&1 &
  FUZZ_BUILD=$!
  # A failing step ends the script: the builds behind it end with it.
  trap 'kill -- "-$TSAN_BUILD" "-$FUZZ_BUILD" 2>/dev/null || true' EXIT
fi
# Waits for a background build; on failure prints the end of its log.
wait_build() {
  local pid=$1 log=$2
  if ! wait "$pid"; then
    tail -n 80 "$log"
    echo "phos test: the build logged in $log failed" >&2
    exit 1
  fi
}

step "unit tests"
ctest --test-dir build -L unit --no-tests=error --output-on-failure -j"$JOBS"

if (( SANITIZERS )); then
  # TSan needs the mmap layout it was built for; ASLR with 32 mmap random
  # bits can place libraries where TSan's shadow goes. setarch -R turns ASLR
  # off for the test processes only.
  step "concurrency tests under ThreadSanitizer (build-tsan/)"
  wait_build "$TSAN_BUILD" build-tsan/phos-build.log
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    setarch "$(uname -m)" -R ctest --test-dir build-tsan -L concurrency --no-tests=error \
      --output-on-failure -j"$JOBS"

  step "parser tests under AddressSanitizer+UBSan, then fuzzers ${FUZZ_SECONDS}s each (build-fuzz/, clang-14)"
  wait_build "$FUZZ_BUILD" build-fuzz/phos-build.log
  ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
    ctest --test-dir build-fuzz -L parser --no-tests=error --output-on-failure -j"$JOBS"
  ctest --test-dir build-fuzz -L fuzz --no-tests=error --output-on-failure -j"$JOBS"
  trap - EXIT
fi

step "all passed in $((SECONDS - t0)) s"
