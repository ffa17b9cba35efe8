#!/usr/bin/env bash
# Runs tests/bench/remoting_bench under `phos run` against a private phosd.
#
#   tests/bench/remoting_bench.sh [BUILD_DIR] [LAUNCHES] [MIB] [BACKEND]
#
# Defaults: build, 20000 launches, 256 MiB copies, the sim backend.
set -euo pipefail
build=${1:-build}
exec "$(dirname "$0")/run_under_private_phosd.sh" "$build" "${4:-sim}" "$build/tests/bench/remoting_bench" \
  "${2:-20000}" "${3:-256}"
