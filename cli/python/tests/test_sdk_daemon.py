"""The SDK end to end: a real phosd (sim backend), checkpoint_app under `phos run`,
checkpoints (cow and stop) and a restore through phos.checkpoint / phos.restore,
status, sessions and the errors phosd answers.

Binaries come from $PHOS_TEST_PHOSD, $PHOS_TEST_PHOS, $PHOS_TEST_LIB and
$PHOS_TEST_CHECKPOINT_APP (set by ctest, cli/python/CMakeLists.txt), else
from build/ in the repository (phosd_harness.py).
"""
import os
import re
import shutil
import signal
import sys
import tempfile
import unittest

import grpc

import phos

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # phosd_harness, beside this file
from phosd_harness import LIBPHOS, PHOS, PHOSD, Child, binary, start_sim_daemon  # noqa: E402

APP = binary("PHOS_TEST_CHECKPOINT_APP", "tests/integration/checkpoint_app")


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
        cls.app = None
        cls.daemon = start_sim_daemon(cls.socket, "--pool", "1")
        cls.app = Child([PHOS, "--socket", cls.socket, "run", "--lib", LIBPHOS, "--", APP, cls.ctl])
        m = cls.app.read_until(r"checkpoint_app: ready pid (\d+)\n", 60)
        if not m:
            cls.tearDownClass()
            raise AssertionError("checkpoint_app did not start:\n" + cls.app.output)
        cls.pid = int(m.group(1))
        cls.next_cmd = 0

    @classmethod
    def tearDownClass(cls):
        # The app outlives a killed `phos run` when it runs in its own pid
        # namespace (as root): end it by its host pid first.
        if getattr(cls, "pid", None):
            try:
                os.kill(cls.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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
