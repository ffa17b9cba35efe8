"""What the SDK's end-to-end tests share: the binaries under test, a child
process whose output a thread collects, starting and stopping a phosd on the
sim backend, waiting for processes that are not our children and for text
in a file, and WholeProcessTestCase, the base of the tests that need CRIU.

Binaries come from $PHOS_TEST_PHOSD, $PHOS_TEST_PHOS, $PHOS_TEST_LIB (set by
ctest, cli/python/CMakeLists.txt), else from build/ in the repository.
"""
import os
import re
import shutil
import signal
import socket as socketlib
import subprocess
import tempfile
import threading
import time
import unittest

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


def read(path):
    """The file's text ("" while it does not exist)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_text(path, needle, timeout_s, start=0):
    """Waits (bounded, 10 ms steps) until `needle` is in the file after offset `start`; whether it came."""
    deadline = time.monotonic() + timeout_s
    while needle not in read(path)[start:]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class WholeProcessTestCase(unittest.TestCase):
    """Tests of whole-process operations (CRIU) on phosds of their own: skips
    unless root with criu on PATH; fails when a binary in `binaries` is
    missing. Each test gets a directory (self.dir) and a phosd "a"
    (self.socket); tearDown ends what the test left: `kill_list` pids (not
    our children), `runs` (our `phos run` children), every phosd."""

    binaries = (PHOSD, PHOS, LIBPHOS)
    build_hint = "phosd, phos and phos_client"
    dir_prefix = "phos_sdk_"
    daemon_flags = ()  # every phosd of the test gets them

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0 or shutil.which("criu") is None:
            raise unittest.SkipTest("skipped: whole-process operations need root and criu on PATH")
        for path in cls.binaries:
            if not os.path.exists(path):
                raise AssertionError("missing %s: build %s" % (path, cls.build_hint))

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix=self.dir_prefix)
        self.daemons = []  # Child, stopped in tearDown
        self.runs = []  # our `phos run` children
        self.kill_list = []  # app pids (not our children) to end if a test stops early
        self.socket = self.start_daemon("a")

    def tearDown(self):
        for pid in self.kill_list:
            if not process_ended(pid):
                os.kill(pid, signal.SIGKILL)
        for run in self.runs:
            if run.poll() is None:
                run.kill()
            run.wait(10)
        for d in self.daemons:
            self.assertIsNotNone(d.stop(), "phosd did not stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_daemon(self, tag, *flags):
        """A phosd of this test's own (checkpoint root in the test's directory,
        no in-memory template copies); its control socket."""
        socket = os.path.join(self.dir, tag + ".sock")
        self.daemons.append(start_sim_daemon(socket, "--checkpoint-root", os.path.join(self.dir, "root-" + tag),
                                             "--template-cache", "off", *self.daemon_flags, *flags))
        return socket

    def peer_token(self):
        """A fresh peer token file (mode 0600) in the test's directory."""
        token = os.path.join(self.dir, "token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(16).hex().encode() + b"\n")
        os.close(fd)
        return token

    def start_listening_daemon(self, tag, token):
        """A phosd with a peer plane on a free loopback port: (its socket, its HOST:PORT)."""
        socket = self.start_daemon(tag, "--listen", "127.0.0.1:0", "--peer-token", token)
        m = self.daemons[-1].read_until(r"\(port (\d+)\)", 20)
        if m is None:
            raise AssertionError("phosd %s did not say its peer port:\n%s" % (tag, self.daemons[-1].output))
        return socket, "127.0.0.1:" + m.group(1)
