#!/usr/bin/env python3
"""A framework job checkpointed mid-run and restored, as a user would do it
(docs/criu.md "Whole-process checkpoint and restore"):

  phosd (sim) on a private socket
  phos run --no-pid-ns -- PYTHON JOB CTL   (own session, output on a log file)
  ... the job says "waiting at step N" ...
  phos checkpoint --pid PID --mode cow --out IMG
  kill -9 PID; touch CTL/resume
  phos restore IMG --detach                (into the same phosd)
  ... the restored job runs the remaining steps and prints --expect

Passes when the restored process printed --expect after "resumed". Exits
77 ("skipped: CRIU unavailable: ...") when not root, without criu, or when
`criu check` fails.
This process is a child subreaper: the restored job is re-parented to it."""
import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from sim_daemon import SimDaemon, read, wait_for

PR_SET_CHILD_SUBREAPER = 36


def gone(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except (ProcessLookupError, FileNotFoundError):
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--phos", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--pause-marker", required=True, help="text the job prints when it waits to be checkpointed")
    ap.add_argument("job")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("skipped: CRIU unavailable: whole-process checkpoints need root")
        return 77
    criu = shutil.which("criu") or ("/usr/sbin/criu" if os.access("/usr/sbin/criu", os.X_OK) else None)
    if criu is None:
        print("skipped: CRIU unavailable: no criu binary (scripts/setup.sh installs it)")
        return 77
    check = subprocess.run([criu, "check"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check.returncode != 0:
        print("skipped: CRIU unavailable: `criu check` failed:\n" + check.stdout)
        return 77
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("checkpoint_under_phos: prctl(PR_SET_CHILD_SUBREAPER) failed")
        return 1
    with tempfile.TemporaryDirectory(prefix="phos_fwck_") as tmp, SimDaemon(a.phos, tmp) as daemon:
        sock, ctl, img = daemon.socket, os.path.join(tmp, "ctl"), os.path.join(tmp, "img")
        jlog = os.path.join(tmp, "job.log")
        os.mkdir(ctl)
        phos = lambda *args: subprocess.run([a.phos, "--socket", sock, *args], stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True, timeout=300)
        job_pid = None
        try:
            if not daemon.ready:
                print("checkpoint_under_phos: phosd did not start:\n" + daemon.log())
                return 1
            # The job: own session, stdin /dev/null, output appended to a file
            # (what CRIU restores without --shell-job or inherited pipes).
            fd = os.open(jlog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            job = subprocess.Popen([a.phos, "--socket", sock, "run", "--no-pid-ns", "--lib", a.lib, "--",
                                    a.python, a.job, ctl], stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                   start_new_session=True)
            os.close(fd)
            if not wait_for(lambda: a.pause_marker in read(jlog) or job.poll() is not None, 600):
                print("checkpoint_under_phos: the job never paused:\n" + read(jlog))
                return 1
            if job.poll() is not None:
                print(f"checkpoint_under_phos: the job ended ({job.returncode}) before pausing:\n" + read(jlog))
                return 1
            job_pid = job.pid  # phos run --no-pid-ns execs the program
            ck = phos("checkpoint", "--pid", str(job_pid), "--mode", "cow", "--out", img)
            print(ck.stdout, end="")
            if ck.returncode != 0:
                print("checkpoint_under_phos: checkpoint failed\n--- job ---\n" + read(jlog) + "\n--- phosd ---\n"
                      + daemon.log())
                return 1
            before = len(read(jlog))
            os.kill(job_pid, signal.SIGKILL)
            job.wait()
            if not wait_for(lambda: gone(job_pid), 30):
                print(f"checkpoint_under_phos: pid {job_pid} did not go away")
                return 1
            open(os.path.join(ctl, "resume"), "w").close()
            rs = phos("restore", img, "--detach")
            print(rs.stdout, end="")
            if rs.returncode != 0:
                print("checkpoint_under_phos: restore failed\n--- phosd ---\n" + daemon.log())
                return 1
            done = lambda: a.expect in read(jlog)[before:] or "MISMATCH" in read(jlog) or gone(job_pid)
            wait_for(done, 600)
            after = read(jlog)[before:]
            print("--- the restored job ---\n" + after, end="")
            if "resumed" not in after or a.expect not in after:
                print("checkpoint_under_phos: the restored job did not finish with the expected result\n--- job log ---\n"
                      + read(jlog) + "\n--- phosd ---\n" + daemon.log())
                return 1
            wait_for(lambda: gone(job_pid), 30)
            return 0
        finally:
            if job_pid is not None and not gone(job_pid):
                os.kill(job_pid, signal.SIGKILL)
                wait_for(lambda: gone(job_pid), 10)


if __name__ == "__main__":
    sys.exit(main())
