"""The SDK's NCCL job calls end to end, on real phosds (sim backend) with
CRIU: a job checkpoint of every rank at one cut (`checkpoint(job=True)`),
its restore (`restore()` of the job image), and a job migration to a
second phosd (`migrate(job=True)`), each reporting the ranks' pids.

The job is 2 ranks of tests/integration's `nccl_ranks train` (a GEMM, an
all-reduce and an optimizer kernel per step, checked against a CPU
reference: a rank prints "trained checksum C OK" when its parameters match
it) under `phos run --no-pid-ns --job sdkjob` on a phosd with 2 GPUs, each
in its own session with stdout/stderr on a file opened O_APPEND (CRIU
restores them as they are). A rank that went back to the cut finishes with
"OK" only if its restored state was exact.

Skips unless root with criu on PATH. Binaries: phosd_harness.py, and
$PHOS_TEST_NCCL_RANKS (set by ctest), else build/tests/integration/nccl_ranks.
"""
import os
import subprocess
import sys
import unittest

import phos

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # phosd_harness, beside this file
from phosd_harness import (LIBPHOS, PHOS, PHOSD, WholeProcessTestCase, binary, read, wait_ended,  # noqa: E402
                           wait_text)

NCCL_RANKS = binary("PHOS_TEST_NCCL_RANKS", "tests/integration/nccl_ranks")
RANKS = 2


class SdkJobTest(WholeProcessTestCase):
    binaries = (PHOSD, PHOS, LIBPHOS, NCCL_RANKS)
    build_hint = "phosd, phos, phos_client and phos_integration_programs"
    dir_prefix = "phos_sdk_job_"
    daemon_flags = ("--sim-gpus", "2")

    def log(self, rank):
        return os.path.join(self.dir, "rank%d.log" % rank)

    def logs(self):
        return "".join("\nphosd %d:\n%s" % (i, d.output) for i, d in enumerate(self.daemons)) + \
            "".join("\nrank %d:\n%s" % (r, read(self.log(r))) for r in range(RANKS))

    def start_ranks(self):
        """The ranks under `phos run` (our children); their pids in rank order."""
        for r in range(RANKS):
            with open(self.log(r), "ab") as out:
                run = subprocess.Popen([PHOS, "--socket", self.socket, "run", "--no-pid-ns", "--job", "sdkjob",
                                        "--lib", LIBPHOS, "--", NCCL_RANKS, "train", str(r), str(RANKS),
                                        os.path.join(self.dir, "job.id")],
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
            self.runs.append(run)
        for r in range(RANKS):
            self.assertTrue(wait_text(self.log(r), "rank %d: step 30" % r, 120), "rank %d did not start" % r +
                            self.logs())
        by_rank = {}
        for s in phos.sessions(socket=self.socket):
            if NCCL_RANKS in s["command"]:
                by_rank[int(s.get("job_rank", 0))] = s["pid"]
        self.assertEqual(sorted(by_rank), list(range(RANKS)), phos.sessions(socket=self.socket))
        pids = [by_rank[r] for r in range(RANKS)]
        self.kill_list.extend(pids)
        return pids

    def sizes(self):
        return [len(read(self.log(r))) for r in range(RANKS)]

    def expect_finished_exactly(self, pids, since):
        """Every rank (`pids`) ends with "trained checksum C OK" after `since`
        bytes of its log, all with one checksum."""
        sums = set()
        for r in range(RANKS):
            self.assertTrue(wait_text(self.log(r), " OK\n", 240, since[r]), "rank %d did not finish" % r +
                            self.logs())
            after = read(self.log(r))[since[r]:]
            self.assertNotIn("nccl_ranks: line ", after)  # no failed check
            line = after[after.index("trained checksum"):].split()
            sums.add(line[2])
        self.assertEqual(len(sums), 1, self.logs())
        for pid in pids:
            self.assertTrue(wait_ended(pid, 60), "rank pid %d did not end" % pid)

    def test_job_checkpoint_with_kill_then_restore_finishes_exactly(self):
        pids = self.start_ranks()
        img = os.path.join(self.dir, "job-img")
        # gpu_only (the default) is refused for a job: its ranks are captured whole.
        with self.assertRaises(ValueError):
            phos.checkpoint(pid=pids[0], job=True, out=img, socket=self.socket)
        result = phos.checkpoint(pid=pids[0], job=True, gpu_only=False, out=img, kill=True,
                                 socket=self.socket).wait(180)
        self.assertEqual(result.image_dir, img)
        self.assertEqual(list(result.rank_pids), pids)
        self.assertEqual(result.counters.get("ranks"), RANKS)
        self.assertEqual(result.counters.get("killed"), RANKS)
        for pid in pids:
            self.assertTrue(wait_ended(pid, 60), "rank pid %d outlived kill=True" % pid)
        for run in self.runs:
            run.wait(30)
        since = self.sizes()
        self.assertTrue(all(" OK\n" not in read(self.log(r)) for r in range(RANKS)),
                        "a rank finished before the checkpoint; lengthen the run")

        restored = phos.restore(img, pids[0], gpu_only=False, socket=self.socket).wait(180)
        self.assertEqual(list(restored.rank_pids), pids)  # --no-pid-ns: their own pids back
        self.assertEqual(sorted(s["pid"] for s in phos.sessions(socket=self.socket)), sorted(pids))
        self.expect_finished_exactly(pids, since)

    def test_job_migrates_to_a_second_phosd(self):
        token = self.peer_token()
        b_socket, to = self.start_listening_daemon("b", token)
        pids = self.start_ranks()
        with self.assertRaises(ValueError):
            phos.migrate(pids[0], to, peer_token_file=token, phosd_map={to: to}, socket=self.socket)
        handle = phos.migrate(pids[0], to, peer_token_file=token, mode="stop", job=True, socket=self.socket)
        # The ranks end here once the job image is committed; we are their
        # parent (phos run), which frees their pids for the restore there.
        for run in self.runs:
            run.wait(120)
        since = self.sizes()
        result = handle.wait(180)
        self.assertIsInstance(result, phos.MigrationResult)
        self.assertEqual(list(result.rank_pids), pids)
        self.assertEqual(result.counters.get("ranks"), RANKS)
        self.assertEqual(sorted(s["pid"] for s in phos.sessions(socket=b_socket)), sorted(pids))
        self.assertEqual(phos.sessions(socket=self.socket), [])
        self.expect_finished_exactly(pids, since)


if __name__ == "__main__":
    unittest.main()
