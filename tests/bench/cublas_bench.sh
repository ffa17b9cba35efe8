#!/usr/bin/env bash
# Runs tests/bench/cublas_bench under `phos run` against a private phosd.
#
#   tests/bench/cublas_bench.sh [BUILD_DIR] [REPS] [BACKEND]
#
# Defaults: build, 5 repetitions (best kept), the sim backend.
set -euo pipefail
build=${1:-build}
exec "$(dirname "$0")/run_under_private_phosd.sh" "$build" "${3:-sim}" "$build/tests/bench/cublas_bench" "${2:-5}"
