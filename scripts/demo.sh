#!/usr/bin/env bash
# scripts/demo.sh — set up a fresh machine, build phos, and show it working.
#
# Today's demo: phosd starts on the sim backend (a functional GPU in memory,
# no GPU needed), `phos status` and `phos ps` answer, two unmodified CUDA
# programs (built by nvcc with -cudart shared) run under `phos run` — their
# kernels execute in phosd's PTX interpreter — and the daemon shuts down
# cleanly on SIGTERM. Later issues grow this into a real checkpoint /
# restore of a running CUDA program.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
echo "demo: building (build/)"
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j"${PHOS_JOBS:-$(nproc)}" --target phos phosd phos_test_apps

PHOS=./build/cli/phos
SOCK=$(mktemp -d /tmp/phos-demo-XXXXXX)/phosd.sock
echo "demo: phos status with no daemon running (expected to fail, with advice):"
$PHOS status --socket "$SOCK" || true

echo "demo: starting phosd on the sim backend at $SOCK"
$PHOS daemon --backend sim --socket "$SOCK" --log-level info &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 250); do [[ -S "$SOCK" ]] && break; sleep 0.02; done

echo; echo "\$ phos status"; $PHOS status --socket "$SOCK"
echo; echo "\$ phos ps";     $PHOS ps --socket "$SOCK"
for app in vector_add reduce_shared; do
  echo; echo "\$ phos run build/tests/apps/$app"
  $PHOS --socket "$SOCK" run "build/tests/apps/$app"
done

echo; echo "demo: stopping phosd (SIGTERM)"
kill -TERM $DAEMON
wait $DAEMON
trap - EXIT
echo "demo: done"
