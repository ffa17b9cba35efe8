#!/usr/bin/env python3
"""Runs one framework script under `phos run` against its own phosd (sim
backend), as a user would: starts `phos daemon --backend sim` on a private
socket, runs `phos run -- PYTHON SCRIPT`, stops phosd. Passes when the
script exits 0 and printed --expect; prints the script's output, and
phosd's log on failure. Used by tests/frameworks/CMakeLists.txt."""
import argparse
import subprocess
import sys
import tempfile

from sim_daemon import SimDaemon


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--phos", required=True, help="the phos CLI")
    ap.add_argument("--lib", required=True, help="libphos.so")
    ap.add_argument("--python", required=True, help="the venv's python")
    ap.add_argument("--expect", required=True, action="append",
                    help="text the script must print (repeat: each one)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--daemon-arg", action="append", default=[],
                    help="an argument for `phos daemon` (repeat: each one), e.g. --daemon-arg=--sim-gpus=2")
    ap.add_argument("script", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="phos_fw_") as tmp, SimDaemon(a.phos, tmp, a.daemon_arg) as d:
        if not d.ready:
            print(f"run_under_phos: phosd did not come up on {d.socket}:\n" + d.log())
            return 1
        cmd = [a.phos, "--socket", d.socket, "run", "--lib", a.lib, "--", a.python] + a.script
        print("run_under_phos: " + " ".join(cmd), flush=True)
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            print(out + f"\nrun_under_phos: timed out after {a.timeout:.0f} s\n--- phosd log ---\n" + d.log())
            return 1
        print(r.stdout, end="")
        missing = [e for e in a.expect if e not in r.stdout]
        ok = r.returncode == 0 and not missing
        if not ok:
            print(f"run_under_phos: exit status {r.returncode}; expected output missing: {missing!r}"
                  "\n--- phosd log ---\n" + d.log())
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
