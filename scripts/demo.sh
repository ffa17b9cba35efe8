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
#   3. it runs again, named `saxpy` (`phos run --name`); while it is busy
#      launching kernels it is checkpointed with `phos checkpoint saxpy`
#      (cow, the default: it keeps running), progress shown. The stall
#      reported is what the app felt: the wait for the few kernels it had
#      queued (the sim's queue is short, like a GPU's launch queue) and
#      CRIU's dump of its CPU state;
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
start_app() {  # start_app OUTFILE [phos run flags...]
  local out=$1
  shift
  setsid "$PHOS" --socket "$SOCK" run "$@" -- "$APP" "$N" </dev/null >>"$out" 2>>"$WORK/app.err" &
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

echo; echo "demo: 2) the same run, checkpointed while it runs"
echo "\$ phos run --name saxpy -- $APP $N &"
start_app "$WORK/app.out" --name saxpy
PID=$(app_pid)
APP_PIDS+=("$PID")
# A quarter of its launches or so: it is busy launching kernels now.
sleep "$(awk -v n="$N" 'BEGIN{printf "%.1f", n * 0.003 / 4}')"
echo "\$ phos ps"; $PHOS --socket "$SOCK" ps
echo; echo "\$ phos checkpoint saxpy --out $IMG"
$PHOS --socket "$SOCK" checkpoint saxpy --out "$IMG"
kill -0 "$PID" && echo "demo: pid $PID kept running through its checkpoint (the stall above is all it felt)"
du -sh "$IMG" "$IMG/criu" | sed 's/^/demo: image /'

echo; echo "demo: 3) kill -9 $PID (the app dies half-way; it has printed nothing)"
kill -9 "$PID"  # `phos run` (its parent, or itself without a pid namespace) ends with it
for _ in $(seq 1 200); do [[ -e /proc/$PID ]] || break; sleep 0.05; done
echo "demo: its output so far: '$(cat "$WORK/app.out")'"

echo; echo "demo: 4) restore it and let it finish"
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
