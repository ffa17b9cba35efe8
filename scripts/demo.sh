#!/usr/bin/env bash
# scripts/demo.sh — set up a fresh machine, build phos, and checkpoint and
# restore a running CUDA program, whole (its GPU state and, through CRIU,
# its CPU state).
#
# On the sim backend (a functional GPU in phosd's memory, kernels run by a
# PTX interpreter; no GPU needed):
#   1. phosd starts; `phos status` answers;
#   2. `saxpy_loop N` (an unmodified CUDA program built with -cudart shared:
#      N kernel launches on one buffer, then a checksum of it) runs once
#      uninterrupted under `phos run`: the reference answer;
#   3. it runs again; half-way through its launches it pauses (makes no
#      CUDA call; its GPU still works through the launches it queued) and
#      is checkpointed with `phos checkpoint --mode cow`, progress shown,
#      without being stopped. The cow "stall" reported is mostly the wait
#      for those queued kernels (t1: the image is the state after them);
#   4. the app is killed (SIGKILL: a crash, a preemption);
#   5. `phos restore` brings it back from the image; it finishes the other
#      half of its launches and prints the same checksum as the reference.
# Root only (CRIU). Non-interactive. Cleans up after itself, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
echo "demo: building (build/)"
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j"${PHOS_JOBS:-$(nproc)}" --target phos phosd phos_client phos_test_apps

[[ $(id -u) -eq 0 ]] || { echo "demo: whole-process checkpoint/restore needs root (CRIU)" >&2; exit 1; }

PHOS=./build/cli/phos
APP=./build/tests/apps/saxpy_loop
N=${PHOS_DEMO_ITERS:-3000}  # ~3 ms per launch on the sim: ~10 s per run
WORK=$(mktemp -d /tmp/phos-demo-XXXXXX)
SOCK=$WORK/phosd.sock
IMG=$WORK/saxpy.img
PAUSE=$WORK/pause
DAEMON=""
APP_PIDS=()

cleanup() {
  local p
  for p in "${APP_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # A restored app is phosd's (it is not our child): whatever phosd still serves.
  if [[ -n "$DAEMON" ]]; then
    for p in $($PHOS --socket "$SOCK" ps --json 2>/dev/null | sed -n 's/^ *"pid": \([0-9]*\),*$/\1/p'); do
      kill -9 "$p" 2>/dev/null || true
    done
  fi
  if [[ -n "$DAEMON" ]]; then
    kill -TERM "$DAEMON" 2>/dev/null || true
    wait "$DAEMON" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that the EXIT trap runs

# The app's pid as phosd sees it (`phos ps --json`; one session at a time
# here). Under `phos run`'s pid namespace the app calls itself pid 1, so
# only phosd's view is usable from this shell.
app_pid() {
  local pid=""
  for _ in $(seq 1 200); do
    pid=$($PHOS --socket "$SOCK" ps --json | sed -n 's/^ *"pid": \([0-9]*\),*$/\1/p' | head -n 1)
    [[ -n "$pid" ]] && { echo "$pid"; return 0; }
    sleep 0.05
  done
  echo "demo: no session of $APP in phos ps" >&2
  return 1
}

# Runs the app under `phos run` in the background, in its own session, with
# stdin /dev/null and its output APPENDED to a file — what CRIU needs to
# dump and restore it without options: a process writing to a pipe owned by
# this script (e.g. `phos run ... | tee`) cannot be dumped (the pipe's other
# end is outside the dumped tree), and one on this terminal would need
# --shell-job on both sides (and the same terminal at restore). A file
# opened O_APPEND (`>>`) is reopened by path at restore, and CRIU does not
# check its size (the app may have written more since the dump).
start_app() {  # start_app OUTFILE [ENV=VALUE...]
  local out=$1
  shift
  env "$@" setsid "$PHOS" --socket "$SOCK" run -- "$APP" "$N" </dev/null >>"$out" 2>>"$WORK/app.err" &
  APP_PIDS+=($!)
  disown "$!"  # its death by SIGKILL below is expected: no job notice from bash
}

echo "demo: starting phosd on the sim backend at $SOCK"
$PHOS daemon --backend sim --socket "$SOCK" --log-level warn &
DAEMON=$!
for _ in $(seq 1 250); do [[ -S "$SOCK" ]] && break; sleep 0.02; done
echo; echo "\$ phos status"; $PHOS status --socket "$SOCK"

echo; echo "demo: 1) the reference: saxpy_loop $N, uninterrupted"
echo "\$ phos run $APP $N"
T0=$(date +%s%N)
$PHOS --socket "$SOCK" run -- "$APP" "$N" | tee "$WORK/reference.out"
echo "demo: took $(( ($(date +%s%N) - T0) / 1000000 )) ms"
REFERENCE=$(tail -n 1 "$WORK/reference.out")

echo; echo "demo: 2) the same run, checkpointed half-way"
# The program's pause point (tests/apps/common.h AppMidpoint): with
# PHOS_APP_PAUSE set it stops MAKING CUDA calls half-way through its loop
# while the file exists; its queued kernels keep running on the GPU. The
# pause gives the checkpoint a moment in which the app makes no GPU calls
# between phosd's GPU capture and the CRIU dump, which a whole-process
# checkpoint needs (docs/criu.md "Checkpoint"; a busy app is retried, then
# refused with that reason).
touch "$PAUSE"
start_app "$WORK/app.out" PHOS_APP_PAUSE="$PAUSE"
for _ in $(seq 1 600); do grep -q "paused at midpoint" "$WORK/app.err" 2>/dev/null && break; sleep 0.05; done
grep -q "paused at midpoint" "$WORK/app.err" || { echo "demo: the app never reached its midpoint:"; cat "$WORK/app.err"; exit 1; }
PID=$(app_pid)
APP_PIDS+=("$PID")
echo "\$ phos ps"; $PHOS --socket "$SOCK" ps
echo; echo "\$ phos checkpoint --pid $PID --mode cow --out $IMG"
$PHOS --socket "$SOCK" checkpoint --pid "$PID" --mode cow --out "$IMG"
kill -0 "$PID" && echo "demo: pid $PID is still running after its checkpoint (the stall above: its queued kernels finishing)"
du -sh "$IMG" "$IMG/criu" | sed 's/^/demo: image /'

echo; echo "demo: 3) kill -9 $PID (the app dies half-way; it has printed nothing)"
kill -9 "$PID"  # `phos run` (its parent, or itself without a pid namespace) ends with it
for _ in $(seq 1 200); do [[ -e /proc/$PID ]] || break; sleep 0.05; done
echo "demo: its output so far: '$(cat "$WORK/app.out")'"

echo; echo "demo: 4) restore it and let it finish"
rm -f "$PAUSE"  # nothing holds it at its midpoint any more
echo "\$ phos restore $IMG"
$PHOS --socket "$SOCK" restore "$IMG"
RESTORED=$(tail -n 1 "$WORK/app.out")

echo
echo "demo: uninterrupted run: $REFERENCE"
echo "demo: restored run:      $RESTORED"
if [[ "$RESTORED" != "$REFERENCE" ]]; then
  echo "demo: FAILED: the restored run printed a different answer" >&2
  exit 1
fi
echo "demo: the restored run printed the same answer"

echo; echo "demo: stopping phosd (SIGTERM)"
kill -TERM "$DAEMON"
wait "$DAEMON"
DAEMON=""
echo "demo: done"
