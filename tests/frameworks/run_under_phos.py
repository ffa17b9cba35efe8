#!/usr/bin/env python3
"""Runs one framework script under `phos run` against its own phosd (sim
backend), as a user would: starts `phos daemon --backend sim` on a private
socket, runs `phos run -- PYTHON SCRIPT`, stops phosd. Passes when the
script exits 0 and printed --expect; prints the script's output, and
phosd's log on failure. Used by tests/frameworks/CMakeLists.txt."""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def wait_for_socket(path, proc, limit_s):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if os.path.exists(path):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(path)
                    return True
                except OSError:
                    pass
        time.sleep(0.05)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--phos", required=True, help="the phos CLI")
    ap.add_argument("--lib", required=True, help="libphos.so")
    ap.add_argument("--python", required=True, help="the venv's python")
    ap.add_argument("--expect", required=True, help="text the script must print")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("script", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="phos_fw_") as tmp:
        sock = os.path.join(tmp, "phosd.sock")
        log_path = os.path.join(tmp, "phosd.log")
        with open(log_path, "w") as log:
            daemon = subprocess.Popen([a.phos, "daemon", "--backend", "sim", "--socket", sock],
                                      stdout=log, stderr=subprocess.STDOUT)
        try:
            if not wait_for_socket(sock, daemon, 30):
                print(f"run_under_phos: phosd did not come up on {sock}:\n" + open(log_path).read())
                return 1
            cmd = [a.phos, "--socket", sock, "run", "--lib", a.lib, "--", a.python] + a.script
            print("run_under_phos: " + " ".join(cmd), flush=True)
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired as e:
                print((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
                print(f"run_under_phos: timed out after {a.timeout:.0f} s\n--- phosd log ---\n" + open(log_path).read())
                return 1
            print(r.stdout, end="")
            ok = r.returncode == 0 and a.expect in r.stdout
            if not ok:
                print(f"run_under_phos: exit status {r.returncode}; expected output "
                      f"{'found' if a.expect in r.stdout else 'missing'}: {a.expect!r}\n--- phosd log ---\n"
                      + open(log_path).read())
            return 0 if ok else 1
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


if __name__ == "__main__":
    sys.exit(main())
