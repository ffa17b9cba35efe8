"""The SDK's whole-process calls end to end, on real phosds (sim backend) with
CRIU: templates (save, start detached and attached, list, remove), a
whole-process restore that reports the restored pid while it runs and its
exit status at the end, and a migration to a second phosd.

The app is saxpy_loop under `phos run`, held at its midpoint while a pause
file exists (PHOS_APP_PAUSE, tests/apps/common.h); as in
tests/integration/template_test.cc it runs in its own session with stdin
/dev/null and stdout/stderr on files opened O_APPEND (CRIU restores them as
they are: every restored copy appends to the same stdout). A copy's output is
what the file gained, and must equal an uninterrupted run's.

Skips unless root with criu on PATH (whole-process operations need both).
Binaries: phosd_harness.py, and $PHOS_TEST_SAXPY_LOOP (set by ctest), else
build/tests/apps/saxpy_loop.
"""
import os
import signal
import subprocess
import sys
import time
import unittest

import grpc

import phos

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # phosd_harness, beside this file
from phosd_harness import (LIBPHOS, PHOS, PHOSD, WholeProcessTestCase, binary, process_ended,  # noqa: E402
                           read, wait_ended, wait_text)

SAXPY = binary("PHOS_TEST_SAXPY_LOOP", "tests/apps/saxpy_loop")
ITERS = "64"  # saxpy_loop pauses after iteration 32
SIGKILL_STATUS = 128 + signal.SIGKILL  # how phosd reports a process SIGKILL ended


class SdkProcessTest(WholeProcessTestCase):
    binaries = (PHOSD, PHOS, LIBPHOS, SAXPY)
    build_hint = "phosd, phos, phos_client and phos_test_apps"
    dir_prefix = "phos_sdk_proc_"
    reference = None

    def setUp(self):
        super().setUp()
        self.out = os.path.join(self.dir, "app.out")
        self.err = os.path.join(self.dir, "app.err")
        self.pause = os.path.join(self.dir, "pause")

    def logs(self):
        return "".join("\nphosd %d:\n%s" % (i, d.output) for i, d in enumerate(self.daemons)) + \
            "\napp stderr:\n" + read(self.err)

    def start_app(self, pause):
        """saxpy_loop under `phos run` on this test's first phosd (our child)."""
        env = dict(os.environ)
        env.pop("PHOS_APP_PAUSE", None)
        if pause:
            env["PHOS_APP_PAUSE"] = self.pause
        with open(self.out, "ab") as out, open(self.err, "ab") as err:
            run = subprocess.Popen([PHOS, "--socket", self.socket, "run", "--lib", LIBPHOS, "--", SAXPY, ITERS],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True)
        self.runs.append(run)
        return run

    def reference_output(self):
        """An uninterrupted run's stdout (once per class: every test runs the same build)."""
        if type(self).reference is None:
            run = self.start_app(pause=False)
            self.assertEqual(run.wait(60), 0, self.logs())
            out = read(self.out)
            self.assertIn("saxpy_loop: checksum 0x", out)
            os.remove(self.out)
            type(self).reference = out
        return type(self).reference

    def start_paused(self):
        """saxpy_loop held at its midpoint; (its `phos run`, its host pid as phosd sees it)."""
        with open(self.pause, "w"):
            pass
        run = self.start_app(pause=True)
        self.assertTrue(wait_text(self.err, "paused at midpoint", 60), "saxpy_loop did not reach its midpoint" +
                        self.logs())
        pids = [s["pid"] for s in phos.sessions(socket=self.socket) if SAXPY in s["command"]]
        self.assertEqual(len(pids), 1, phos.sessions(socket=self.socket))
        self.kill_list.append(pids[0])
        return run, pids[0]

    def test_template_save_start_list_remove(self):
        reference = self.reference_output()
        run, source = self.start_paused()

        saved = phos.template_save("fn", source, socket=self.socket).wait(120)
        self.assertTrue(saved.image_dir.endswith("/templates/fn"), saved.image_dir)
        self.assertEqual(saved.pid, source)
        self.assertEqual(saved.mode, "stop")
        self.assertEqual(saved.counters["source_ended"], 1)
        self.assertTrue(os.path.isfile(os.path.join(saved.image_dir, "manifest")), os.listdir(saved.image_dir))
        self.assertIsNotNone(run.wait(20), "the source did not end after the save")
        listed = phos.template_list(socket=self.socket)
        self.assertEqual([t["name"] for t in listed], ["fn"])
        self.assertEqual(listed[0]["source_pid"], source)
        self.assertEqual(listed[0]["dir"], saved.image_dir)

        # Attached, the pause file still there: the pid comes while the
        # instance runs (held at its midpoint); SIGKILLed, it reports 137.
        held = phos.template_start("fn", detach=False, socket=self.socket)
        first = held.wait_running(60)
        self.kill_list.append(first)
        self.assertFalse(held.done(), "the attached start ended while its instance runs")
        self.assertFalse(process_ended(first))
        self.assertIn(first, [s["pid"] for s in phos.sessions(socket=self.socket)])
        self.assertIn(first, phos.template_list(socket=self.socket)[0]["running_pids"])
        os.kill(first, signal.SIGKILL)
        killed = held.wait(30)
        self.assertEqual(killed.exit_status, SIGKILL_STATUS)
        self.assertEqual(killed.pid, first)
        self.assertIn("criu_restore_ms", killed.counters)

        # Detached: the pid, once it runs; released, it prints the reference.
        seen = len(read(self.out))
        second = phos.template_start("fn", socket=self.socket, timeout=60)
        self.kill_list.append(second)
        self.assertIsInstance(second, int)
        os.remove(self.pause)
        self.assertTrue(wait_ended(second, 60), "instance %d did not finish" % second + self.logs())
        self.assertEqual(read(self.out)[seen:], reference)

        # Attached, not held: runs to its end; exit status 0.
        seen = len(read(self.out))
        handle = phos.template_start("fn", detach=False, socket=self.socket)
        third = handle.wait_running(60)
        self.kill_list.append(third)
        result = handle.wait(120)
        self.assertEqual(result.exit_status, 0, self.logs())
        self.assertEqual(result.pid, third)
        self.assertEqual(read(self.out)[seen:], reference)

        self.assertEqual(phos.template_remove("fn", socket=self.socket), saved.image_dir)
        self.assertFalse(os.path.exists(saved.image_dir))
        self.assertEqual(phos.template_list(socket=self.socket), [])
        with self.assertRaises(phos.PhosError) as cm:
            phos.template_start("fn", socket=self.socket)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("no template 'fn'", cm.exception.message)
        with self.assertRaises(phos.PhosError) as cm:
            phos.template_remove("fn", socket=self.socket)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_whole_process_restore_reports_pid_then_exit_status(self):
        reference = self.reference_output()
        run, pid = self.start_paused()
        img = os.path.join(self.dir, "img")
        phos.checkpoint(pid=pid, mode="stop", gpu_only=False, out=img, socket=self.socket).wait(120)
        os.kill(pid, signal.SIGKILL)
        self.assertIsNotNone(run.wait(20))
        self.assertTrue(wait_ended(pid, 10))

        handle = phos.restore(img, pid, gpu_only=False, socket=self.socket)
        restored = handle.wait_running(60)
        self.kill_list.append(restored)
        self.assertEqual(handle.running_pid, restored)
        self.assertFalse(handle.done(), "the restore ended while the restored process is held at its midpoint")
        # The pid came from a `running` event (not from a result: there is
        # none yet). The concurrent restore's `load` events may come before
        # or after it: what was reported, never which event came last.
        self.assertIn("running", handle.phases)
        self.assertFalse(process_ended(restored))
        os.remove(self.pause)
        result = handle.wait(120)
        self.assertEqual(result.pid, restored)
        self.assertEqual(result.exit_status, 0, self.logs())
        self.assertEqual(read(self.out), reference)

    def test_migrate_to_a_second_phosd(self):
        reference = self.reference_output()
        token = self.peer_token()
        b_socket, to = self.start_listening_daemon("b", token)
        run, pid = self.start_paused()

        # A wrong token: refused; the app runs on here.
        with self.assertRaises(phos.PhosError) as cm:
            phos.migrate(pid, to, peer_token="wrong", socket=self.socket).wait(120)
        self.assertIn("token", cm.exception.message.lower())
        self.assertIsNone(run.poll(), "a refused migration ended the source")

        handle = phos.migrate(pid, to, peer_token_file=token, socket=self.socket)
        result = handle.wait(120)
        self.kill_list.append(result.pid)
        self.assertIsInstance(result, phos.MigrationResult)
        self.assertEqual(result.source_pid, pid)
        self.assertEqual(result.destination, to)
        self.assertEqual(result.mode, "recopy")
        self.assertGreater(result.pid, 0)
        self.assertGreater(result.downtime_us, 0)
        self.assertGreater(result.bytes_sent, 0)
        self.assertEqual(handle.running_pid, result.pid)
        self.assertIsNotNone(run.wait(20), "the source's phos run did not end after the migration")
        self.assertEqual([s["pid"] for s in phos.sessions(socket=b_socket)], [result.pid])
        deadline = time.monotonic() + 10
        while phos.sessions(socket=self.socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(phos.sessions(socket=self.socket), [], "the source's session outlived the migration")
        os.remove(self.pause)
        self.assertTrue(wait_ended(result.pid, 60), "the migrated copy did not finish" + self.logs())
        self.assertEqual(read(self.out), reference)


if __name__ == "__main__":
    unittest.main()
