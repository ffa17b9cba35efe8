"""Checkpoint and restore: started at once, watched through an OperationHandle
(handle.py, which reads phosd's stream of events on a background thread).
"""
import os

from ._stubs import pb
# Progress, OperationResult and OperationHandle lived here first; still importable from here.
from .handle import OperationHandle, OperationResult, Progress, check_pid, start  # noqa: F401

_MODES = {"cow": pb.MODE_COW, "recopy": pb.MODE_RECOPY, "stop": pb.MODE_STOP}
_KEEPS = {"manual": pb.KEEP_MANUAL, "latest": pb.KEEP_LATEST, "best": pb.KEEP_BEST}


def checkpoint(name=None, pid=None, mode="cow", gpu_only=True, out=None, keep="manual", metric=None, socket=None, *,
               keep_count=0, lower_is_better=False, kill=False, job=False):
    """Starts a checkpoint of a process running under `phos run`; returns an OperationHandle.

    The application keeps running (in "cow" and "recopy" modes it is stopped
    for milliseconds only). Call .wait() on the handle for the
    OperationResult (image_dir, stall_us, counters, mode, ...).

    Args:
        name: image name in phosd's checkpoint root (default "<pid>-<UTC time>");
            ignored with `out`.
        pid: the process (default: the caller, os.getpid(), for a program that
            checkpoints itself).
        mode: "cow" (the image is the state when the checkpoint started; a write
            to a buffer not yet saved first copies it aside), "recopy" (the
            state at the end; rewritten buffers are copied again in a short
            final stop) or "stop" (the application waits for the whole copy).
        gpu_only: save the GPU state only (no CRIU). False: the whole process
            (GPU state plus its CPU state through CRIU, docs/criu.md; phosd
            must run as root), in any mode, the app running on.
        out: image directory (must not exist); default: a directory under
            phosd's checkpoint root, where `keep` retention applies.
        keep: "manual" (never deleted by phos), "latest" (phosd keeps the newest
            keep_count images of the class) or "best" (the keep_count best by
            `metric`).
        metric: the image's metric for keep="best" (e.g. validation accuracy).
        socket: phosd's control socket; default $PHOS_SOCKET, else
            /run/phos/phosd.sock.
        keep_count: how many images keep="latest"/"best" keeps (0: phosd's
            default, 3).
        lower_is_better: keep="best" ranks smaller metrics first (a loss).
        kill: once the image is committed, end the process (SIGKILL); the
            operation finishes when its GPU memory is free (preemption: save,
            then give the GPU away). Default False: it keeps running. The
            result's counters then hold "killed": 1.
        job: checkpoint the whole NCCL job `pid` is a rank of (every process
            sharing a communicator with it, on this phosd and, with --etcd,
            on others): every rank brought to one consistent cut and captured
            whole (needs gpu_only=False), one job image; with kill, every
            rank ends once it is committed. result.rank_pids lists the ranks'
            pids in rank order (docs/protocols.md "Job checkpoints").

    Raises:
        ValueError: a bad argument (unknown mode or keep, keep="best" without
            a metric, a pid that is not a positive int).
        PhosError: UNAVAILABLE when no phosd answers on the socket (at once);
            the operation's own failures come from wait().
    """
    pid = check_pid(os.getpid() if pid is None else pid)
    if mode not in _MODES:
        raise ValueError("mode must be one of %s (got %r)" % (", ".join(sorted(_MODES)), mode))
    if keep not in _KEEPS:
        raise ValueError("keep must be one of %s (got %r)" % (", ".join(sorted(_KEEPS)), keep))
    if keep == "best" and metric is None:
        raise ValueError('keep="best" ranks images by a metric: pass metric=VALUE')
    if isinstance(keep_count, bool) or not isinstance(keep_count, int) or keep_count < 0:
        raise ValueError("keep_count must be an int >= 0 (got %r)" % (keep_count,))
    if job and gpu_only:
        raise ValueError("a job checkpoint captures every rank whole (its restore recreates the processes): "
                         "pass gpu_only=False")
    req = pb.CheckpointRequest(pid=pid, mode=_MODES[mode], leave_running=not kill, kill=bool(kill),
                               gpu_only=bool(gpu_only), job=bool(job),
                               keep=_KEEPS[keep], keep_count=keep_count,
                               metric_lower_is_better=bool(lower_is_better))
    if metric is not None:
        req.metric_value = float(metric)
    if name is not None:
        req.name = str(name)
    if out is not None:
        req.out_dir = os.path.normpath(os.path.abspath(os.fspath(out)))  # phosd wants an absolute path
    return start("Checkpoint", req, socket, pid, mode)


def restore(image_dir, pid, gpu_only=True, concurrent=True, socket=None, *, detach=False, verify="auto",
            device_map=None, phosd_map=None):
    """Starts restoring a process's GPU state (gpu_only=False: the whole process); returns an OperationHandle.

    GPU-only restores are in place: the live session of `pid` is rolled back
    to the image (by default phosd verifies every checksum first and leaves
    the process untouched when one fails; see `verify`).

    Args:
        image_dir: the image (OperationResult.image_dir of a checkpoint).
        pid: the running process to roll back.
        gpu_only: restore the GPU state only. False: recreate the process of
            a whole-process image (CRIU; phosd must run as root): a new pid
            when it ran in its own pid namespace (`phos run`'s default as
            root), else its old pid. `pid` is not used by phosd then but must
            still be a positive int. handle.wait_running() returns the
            restored process's pid as soon as it runs.
        concurrent: True: the process resumes at once and buffers load in the
            background in the order it first uses them; False: it waits until
            everything is loaded (stop-the-world).
        socket: phosd's control socket (default as for checkpoint()).
        detach: whole-process restores only. False (default): the operation
            lasts as long as the restored process: wait() returns once it
            has exited, and result.exit_status is its exit status (None, and
            wait() returns while it still runs, when phosd cannot reap it).
            True: wait() returns as soon as it runs (result.pid), without an
            exit status.
        verify: when the image's checksums are checked (`phos restore
            --verify`): "first" reads and checks all of gpu.img before
            anything changes; "as-loaded" checks each chunk as it loads,
            before it reaches the GPU (the image is read once; a bad chunk
            fails the restore: a restored process is killed, a concurrent
            one has the calls needing an unloaded buffer refused); "auto"
            (default): first for gpu_only, as-loaded otherwise.
        device_map: whole-process and job restores: {old GPU: new GPU}
            (phosd's ordinals, as sessions() shows them) puts what ran on
            the image's GPU `old` on this phosd's GPU `new` (the same kind
            of GPU); default: the same GPU.
        phosd_map: job images (gpu_only=False): {"HOST:PORT": "HOST:PORT" or
            "here"} restores the ranks the phosd at the key took on the one
            at the value instead (their images must be readable there).

    A job image (a checkpoint with job=True) restores every rank, which
    runs on detached; result.rank_pids lists their pids in rank order.

    Raises:
        ValueError: pid is not a positive int, or verify is not one of
            "auto", "first", "as-loaded".
        PhosError: UNAVAILABLE when no phosd answers (at once); the
            operation's failures (NOT_FOUND, DATA_LOSS for a corrupt image, ...)
            come from wait() (and wait_running()).
    """
    pid = check_pid(pid)
    if verify not in ("auto", "first", "as-loaded"):
        raise ValueError("verify must be 'auto', 'first' or 'as-loaded', got %r" % (verify,))
    req = pb.RestoreRequest(image_dir=os.path.normpath(os.path.abspath(os.fspath(image_dir))), pid=pid,
                            gpu_only=bool(gpu_only), concurrent=bool(concurrent), detach=bool(detach),
                            verify=verify)
    for old, new in (device_map or {}).items():
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (old, new)):
            raise ValueError("device_map maps GPU ordinals (ints >= 0) to GPU ordinals (got %r: %r)" % (old, new))
        req.device_map[old] = new
    for old, new in (phosd_map or {}).items():
        if not isinstance(old, str) or ":" not in old or not isinstance(new, str) or not (new == "here" or ":" in new):
            raise ValueError('phosd_map maps a phosd\'s "HOST:PORT" to another\'s or to "here" (got %r: %r)' %
                             (old, new))
        req.phosd_map[old] = new
    return start("Restore", req, socket, pid, "concurrent" if concurrent else "stop-the-world")
