"""What the SDK's end-to-end tests share: the binaries under test, a child
process whose output a thread collects, starting and stopping a phosd on the
sim backend, waiting for processes that are not our children.

Binaries come from $PHOS_TEST_PHOSD, $PHOS_TEST_PHOS, $PHOS_TEST_LIB (set by
ctest, cli/python/CMakeLists.txt), else from build/ in the repository.
"""
import os
import re
import socket as socketlib
import subprocess
import threading
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def binary(env, default):
    """$env, else build/`default` in the repository."""
    return os.environ.get(env) or os.path.join(REPO, "build", default)


PHOSD = binary("PHOS_TEST_PHOSD", "daemon/phosd")
PHOS = binary("PHOS_TEST_PHOS", "cli/phos")
LIBPHOS = binary("PHOS_TEST_LIB", "interposer/client/libphos.so")


class Child:
    """A child process whose stdout+stderr a thread collects (the app prints
    its answers there)."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self._cond = threading.Condition()
        self._out = ""  # guarded by _cond
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self):
        for chunk in iter(lambda: self.proc.stdout.read1(4096), b""):
            with self._cond:
                self._out += chunk.decode(errors="replace")
                self._cond.notify_all()

    @property
    def output(self):
        with self._cond:
            return self._out

    def read_until(self, pattern, timeout_s, start=0):
        """Waits for `pattern` (a regex) in the output after offset `start`; returns the match or None."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                m = re.compile(pattern).search(self._out, start)
                left = deadline - time.monotonic()
                if m or left <= 0 or (self.proc.poll() is not None and not self._cond.wait(0.2)):
                    return m
                self._cond.wait(min(left, 0.5))

    def stop(self, sig_term=True, timeout_s=10):
        if self.proc.poll() is None:
            self.proc.terminate() if sig_term else self.proc.kill()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        # The output ends with the process unless something it started
        # still holds the pipe; then leave the pipe to the pump thread.
        self._pump_thread.join(1)
        if not self._pump_thread.is_alive():
            self.proc.stdout.close()
        return self.proc.returncode


def wait_for_data_socket(control_socket, timeout_s):
    """phosd is ready for sessions once its data socket (<control>.data) accepts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_SEQPACKET)
        try:
            s.connect(control_socket + ".data")
            return True
        except OSError:
            time.sleep(0.05)
        finally:
            s.close()
    return False


def start_sim_daemon(socket, *flags):
    """phosd --backend sim on `socket` (plus `flags`), ready for sessions; raises AssertionError if it is not."""
    daemon = Child([PHOSD, "--backend", "sim", "--socket", socket] + list(flags))
    if not wait_for_data_socket(socket, 20):
        daemon.stop()
        raise AssertionError("phosd did not start:\n" + daemon.output)
    return daemon


def process_ended(pid):
    """Gone, or a zombie nobody reaped yet (it runs no more either way)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return True
    paren = stat.rfind(")")
    return paren != -1 and stat[paren + 2:paren + 3] == "Z"


def wait_ended(pid, timeout_s):
    """Waits (bounded, 10 ms steps) until process_ended(pid); whether it did."""
    deadline = time.monotonic() + timeout_s
    while not process_ended(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
