"""The SDK end to end: a real phosd (sim backend), checkpoint_app under `phos run`,
checkpoints (cow and stop) and a restore through phos.checkpoint / phos.restore,
status, sessions and the errors phosd answers.

Binaries come from $PHOS_TEST_PHOSD, $PHOS_TEST_PHOS, $PHOS_TEST_LIB and
$PHOS_TEST_CHECKPOINT_APP (set by ctest, cli/python/CMakeLists.txt), else
from build/ in the repository.
"""
import os
import re
import shutil
import socket as socketlib
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

import phos

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def _binary(env, default):
    return os.environ.get(env) or os.path.join(REPO, "build", default)


PHOSD = _binary("PHOS_TEST_PHOSD", "daemon/phosd")
PHOS = _binary("PHOS_TEST_PHOS", "cli/phos")
LIBPHOS = _binary("PHOS_TEST_LIB", "interposer/client/libphos.so")
APP = _binary("PHOS_TEST_CHECKPOINT_APP", "tests/integration/checkpoint_app")


class Child:
    """A child process whose stdout+stderr a thread collects (the app prints
    its answers there)."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self._cond = threading.Condition()
        self._out = ""  # guarded by _cond
        threading.Thread(target=self._pump, daemon=True).start()

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


class SdkDaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for path in (PHOSD, PHOS, LIBPHOS, APP):
            if not os.path.exists(path):
                raise AssertionError("missing %s: build phosd, phos, phos_client and phos_checkpoint_app" % path)
        cls.dir = tempfile.mkdtemp(prefix="phos_sdk_")
        cls.socket = os.path.join(cls.dir, "phosd.sock")
        cls.ctl = os.path.join(cls.dir, "ctl")
        os.makedirs(cls.ctl)
        cls.daemon = Child([PHOSD, "--backend", "sim", "--socket", cls.socket, "--pool", "1"])
        cls.app = None
        if not wait_for_data_socket(cls.socket, 20):
            cls.daemon.stop()
            raise AssertionError("phosd did not start:\n" + cls.daemon.output)
        cls.app = Child([PHOS, "--socket", cls.socket, "run", "--lib", LIBPHOS, "--", APP, cls.ctl])
        m = cls.app.read_until(r"checkpoint_app: ready pid (\d+)\n", 60)
        if not m:
            cls.tearDownClass()
            raise AssertionError("checkpoint_app did not start:\n" + cls.app.output)
        cls.pid = int(m.group(1))
        cls.next_cmd = 0

    @classmethod
    def tearDownClass(cls):
        if cls.app is not None:
            cls.app.stop(sig_term=False)
        rc = cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc is not None, "phosd did not stop"

    def cmd(self, command):
        """Sends one command to checkpoint_app (a file ctl/cmd-N); returns its answer."""
        n = type(self).next_cmd
        type(self).next_cmd += 1
        start = len(self.app.output)
        tmp = os.path.join(self.ctl, "tmp")
        with open(tmp, "w") as f:
            f.write(command + "\n")
        os.rename(tmp, os.path.join(self.ctl, "cmd-%d" % n))
        m = self.app.read_until(r"ack %d\n" % n, 60, start)
        self.assertIsNotNone(m, "no ack for %r:\n%s" % (command, self.app.output))
        return self.app.output[start:m.end()]

    @staticmethod
    def field(text, key):
        m = re.search(key + r" (\S+)", text)
        return m.group(1) if m else None

    # unittest runs tests in name order; the app's state carries over, so
    # every test names what it expects without depending on the others.

    def test_status_and_sessions(self):
        st = phos.status(socket=self.socket)
        self.assertEqual(st["backend"], "sim")
        self.assertEqual(st["daemon_pid"], self.daemon.proc.pid)
        self.assertEqual(st["socket_path"], self.socket)
        self.assertGreaterEqual(st["session_count"], 1)
        self.assertIsInstance(st["counters"], dict)
        self.assertTrue(st["gpus"] and st["gpus"][0]["total_memory_bytes"] > 0, st["gpus"])

        mine = [s for s in phos.sessions(socket=self.socket) if s["pid"] == self.pid]
        self.assertEqual(len(mine), 1, phos.sessions(socket=self.socket))
        self.assertEqual(mine[0]["state"], "running")
        self.assertIn("checkpoint_app", mine[0]["command"])
        self.assertGreater(mine[0]["buffer_count"], 0)
        self.assertEqual([s["pid"] for s in phos.sessions(socket=self.socket, pid=self.pid)], [self.pid])

    def test_checkpoint_cow_and_stop_then_restore(self):
        sum_at_checkpoint = self.field(self.cmd("step"), "checksum")
        self.assertTrue(sum_at_checkpoint)
        steps_at_checkpoint = self.field(self.cmd("print"), "steps")

        img = os.path.join(self.dir, "img-cow")
        handle = phos.checkpoint(pid=self.pid, mode="cow", out=img, socket=self.socket)
        result = handle.wait(timeout=60)
        self.assertTrue(handle.done())
        self.assertEqual(result.image_dir, img)
        self.assertEqual(result.mode, "cow")
        self.assertEqual(result.pid, self.pid)
        self.assertIsInstance(result.stall_us, int)
        self.assertGreater(result.bytes_written, 0)
        self.assertIsInstance(result.counters, dict)
        self.assertTrue(os.path.isfile(os.path.join(img, "manifest")), os.listdir(img))
        self.assertIsNotNone(handle.progress, "no progress event before the result")
        self.assertTrue(handle.progress.phase)
        self.assertIs(handle.wait(), result)  # a finished handle answers again

        # Stop-the-world, into phosd's checkpoint root, named.
        stop = phos.checkpoint(name="sdk-stop", pid=self.pid, mode="stop", socket=self.socket).wait(60)
        self.assertEqual(stop.mode, "stop")
        self.assertEqual(os.path.basename(stop.image_dir), "sdk-stop")
        self.assertTrue(os.path.isfile(os.path.join(stop.image_dir, "manifest")))

        # The app moves on; the restore brings the device back to the image.
        moved = self.cmd("step")
        self.assertNotEqual(self.field(moved, "checksum"), sum_at_checkpoint)
        restored = phos.restore(img, self.pid, socket=self.socket).wait(60)
        self.assertEqual(restored.image_dir, img)
        self.assertEqual(restored.mode, "concurrent")
        back = self.cmd("print")
        self.assertEqual(self.field(back, "checksum"), sum_at_checkpoint, back)
        self.assertEqual(self.field(back, "steps"), steps_at_checkpoint, back)

    def test_default_socket_is_phos_socket_env(self):
        old = os.environ.get("PHOS_SOCKET")
        os.environ["PHOS_SOCKET"] = self.socket
        try:
            self.assertEqual(phos.default_socket(), self.socket)
            self.assertEqual(phos.status()["socket_path"], self.socket)
        finally:
            if old is None:
                del os.environ["PHOS_SOCKET"]
            else:
                os.environ["PHOS_SOCKET"] = old

    def test_errors(self):
        # This test process is not running under phos: no session.
        with self.assertRaises(phos.PhosError) as cm:
            phos.checkpoint(socket=self.socket).wait(30)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.code_name, "NOT_FOUND")
        self.assertIn(str(os.getpid()), cm.exception.message)

        with self.assertRaises(phos.PhosError) as cm:
            phos.restore(os.path.join(self.dir, "no-such-image"), self.pid, socket=self.socket).wait(30)
        self.assertNotEqual(cm.exception.code, grpc.StatusCode.OK)

        # Whole-process restore of a directory that is no whole-process image.
        with self.assertRaises(phos.PhosError) as cm:
            phos.restore(os.path.join(self.dir, "no-such-image"), self.pid, gpu_only=False, socket=self.socket).wait(30)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("not a whole-process image", cm.exception.message)

        # No daemon: at once, UNAVAILABLE.
        with self.assertRaises(phos.PhosError) as cm:
            phos.status(socket=os.path.join(self.dir, "nobody.sock"))
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)

        for bad in [dict(mode="fast"), dict(keep="forever"), dict(keep="best"), dict(pid=0), dict(pid="1")]:
            with self.subTest(**bad), self.assertRaises(ValueError):
                phos.checkpoint(socket=self.socket, **{"pid": self.pid, **bad})


if __name__ == "__main__":
    unittest.main()
