"""phosd on the sim backend for one framework test: started on a private
socket, ready once the socket accepts a connection, stopped with SIGTERM
(then SIGKILL). Used by run_under_phos.py and checkpoint_under_phos.py."""
import os
import signal
import socket
import subprocess
import time


def wait_for(pred, limit_s, step_s=0.05):
    """True once pred() is, False after limit_s seconds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return False


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class SimDaemon:
    """`with SimDaemon(phos, dir) as d:` d.socket, d.log(); d.ready is False
    when phosd did not come up within 30 s (its log says why)."""

    def __init__(self, phos, directory, extra_args=()):
        self.socket = os.path.join(directory, "phosd.sock")
        self.log_path = os.path.join(directory, "phosd.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([phos, "daemon", "--backend", "sim", "--socket", self.socket, *extra_args],
                                         stdout=log, stderr=subprocess.STDOUT)
        self.ready = wait_for(self._accepts, 30)

    def _accepts(self):
        if self.proc.poll() is not None or not os.path.exists(self.socket):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def log(self):
        return read(self.log_path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return False
