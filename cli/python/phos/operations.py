"""Long operations (checkpoint, restore): started at once, watched through a handle.

phosd answers Checkpoint and Restore with a stream of OperationEvents: progress
events, then exactly one terminal event holding the result or the error
(proto/phos.proto). A handle reads that stream on a background thread, so the
caller (a training loop, say) keeps running and looks at the handle when it
likes.
"""
import dataclasses
import os
import threading
from typing import Dict, Optional

import grpc

from . import _channel
from ._stubs import pb
from .errors import PhosError

_MODES = {"cow": pb.MODE_COW, "recopy": pb.MODE_RECOPY, "stop": pb.MODE_STOP}
_KEEPS = {"manual": pb.KEEP_MANUAL, "latest": pb.KEEP_LATEST, "best": pb.KEEP_BEST}


@dataclasses.dataclass(frozen=True)
class Progress:
    """One progress event. phase is a short word ("quiesce", "copy", "commit",
    ...); message is for humans; bytes_total is 0 when a phase moves no data."""
    phase: str
    message: str
    bytes_done: int
    bytes_total: int
    elapsed_ms: int
    bytes_per_second: float


@dataclasses.dataclass(frozen=True)
class OperationResult:
    """What a finished checkpoint or restore reports.

    image_dir: the image written (checkpoint) or read (restore).
    pid: the process the operation was on.
    mode: "cow", "recopy" or "stop" for a checkpoint; "concurrent" or
        "stop-the-world" for a restore (as requested).
    stall_us: how long the application was stopped, in microseconds.
    total_ms: the whole operation, in milliseconds.
    bytes_written: bytes of GPU state saved or loaded.
    counters: the operation's non-zero engine counters (shadows,
        copier_yields, recopy_rounds, ...; docs/protocols.md).
    operation_id: phosd's id of the operation.
    """
    image_dir: str
    pid: int
    mode: str
    stall_us: int
    total_ms: int
    bytes_written: int
    counters: Dict[str, int]
    operation_id: int


class OperationHandle:
    """A checkpoint or restore in flight (returned by phos.checkpoint / phos.restore).

    The operation runs in phosd; this handle follows it. Dropping the handle
    does not cancel the operation (phosd completes it either way).
    """

    def __init__(self, rpc, channel, call, pid, mode):
        self._rpc = rpc
        self._pid = pid
        self._mode = mode
        self._finished = threading.Event()
        # Written by the reader thread only; read by anyone under _lock.
        self._lock = threading.Lock()
        self._progress = None
        self._result = None
        self._error = None
        self._operation_id = None
        self._thread = threading.Thread(target=self._read, args=(channel, call),
                                        name="phos-%s-%d" % (rpc.lower(), pid), daemon=True)
        self._thread.start()

    # The reader thread: consumes the stream until its end.
    def _read(self, channel, call):
        result = error = None
        try:
            for event in call:
                with self._lock:
                    if self._operation_id is None:
                        self._operation_id = event.operation_id
                kind = event.WhichOneof("event")
                if kind == "progress":
                    p = event.progress
                    with self._lock:
                        self._progress = Progress(p.phase, p.message, p.bytes_done, p.bytes_total, p.elapsed_ms,
                                                  p.bytes_per_second)
                elif kind == "done":
                    d = event.done
                    result = OperationResult(d.image_dir, d.pid or self._pid, self._mode, d.stall_us, d.total_ms,
                                             d.bytes_written, dict(d.counters), event.operation_id)
                elif kind == "failed":
                    error = PhosError(event.failed.code, event.failed.message, self._rpc)
        except grpc.RpcError as e:
            # A terminal `failed` event carries the same code with the
            # fuller message; keep it. Otherwise the status is the error
            # (refusals before the operation starts: NOT_FOUND, UNIMPLEMENTED, ...).
            if error is None:
                error = PhosError.from_rpc_error(self._rpc, e)
        except Exception as e:  # noqa: BLE001 - must reach the waiter, not die with the thread
            error = PhosError(grpc.StatusCode.UNKNOWN, "reading the %s stream: %r" % (self._rpc, e), self._rpc)
        finally:
            channel.close()
        if result is None and error is None:
            error = PhosError(grpc.StatusCode.INTERNAL, "phosd ended the %s stream without a result" % self._rpc,
                              self._rpc)
        with self._lock:
            self._result = result
            self._error = error
        self._finished.set()

    def done(self):
        """True once the operation finished (successfully or not)."""
        return self._finished.is_set()

    @property
    def progress(self) -> Optional[Progress]:
        """The latest Progress phosd reported, or None before the first."""
        with self._lock:
            return self._progress

    @property
    def operation_id(self) -> Optional[int]:
        """phosd's id of the operation, once its first event arrived."""
        with self._lock:
            return self._operation_id

    def wait(self, timeout=None) -> OperationResult:
        """Blocks until the operation finished and returns its OperationResult.

        Args:
            timeout: seconds to wait at most (None: as long as it takes).

        Raises:
            PhosError: the operation failed or phosd refused it (e.g. NOT_FOUND:
                no session for the pid, or not a whole-process image;
                DATA_LOSS: a corrupt image).
            TimeoutError: still running after `timeout` seconds (the operation
                goes on; call wait() again).
        """
        if not self._finished.wait(timeout):
            raise TimeoutError("phos %s of pid %d still running after %s s" % (self._rpc.lower(), self._pid, timeout))
        with self._lock:
            if self._error is not None:
                raise self._error
            return self._result

    def __repr__(self):
        state = "done" if self.done() else "running"
        return "<phos.OperationHandle %s pid=%d %s>" % (self._rpc.lower(), self._pid, state)


def _check_pid(pid):
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31:
        raise ValueError("pid must be a positive int (got %r)" % (pid,))
    return pid


def _start(rpc, request, socket, pid, mode):
    channel, stub = _channel.connect(socket, rpc)
    try:
        call = getattr(stub, rpc)(request)
    except BaseException:
        channel.close()
        raise
    return OperationHandle(rpc, channel, call, pid, mode)


def checkpoint(name=None, pid=None, mode="cow", gpu_only=True, out=None, keep="manual", metric=None, socket=None, *,
               keep_count=0, lower_is_better=False):
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

    Raises:
        ValueError: a bad argument (unknown mode or keep, keep="best" without
            a metric, a pid that is not a positive int).
        PhosError: UNAVAILABLE when no phosd answers on the socket (at once);
            the operation's own failures come from wait().
    """
    pid = _check_pid(os.getpid() if pid is None else pid)
    if mode not in _MODES:
        raise ValueError("mode must be one of %s (got %r)" % (", ".join(sorted(_MODES)), mode))
    if keep not in _KEEPS:
        raise ValueError("keep must be one of %s (got %r)" % (", ".join(sorted(_KEEPS)), keep))
    if keep == "best" and metric is None:
        raise ValueError('keep="best" ranks images by a metric: pass metric=VALUE')
    if isinstance(keep_count, bool) or not isinstance(keep_count, int) or keep_count < 0:
        raise ValueError("keep_count must be an int >= 0 (got %r)" % (keep_count,))
    req = pb.CheckpointRequest(pid=pid, mode=_MODES[mode], leave_running=True, gpu_only=bool(gpu_only),
                               keep=_KEEPS[keep], keep_count=keep_count,
                               metric_lower_is_better=bool(lower_is_better))
    if metric is not None:
        req.metric_value = float(metric)
    if name is not None:
        req.name = str(name)
    if out is not None:
        req.out_dir = os.path.normpath(os.path.abspath(os.fspath(out)))  # phosd wants an absolute path
    return _start("Checkpoint", req, socket, pid, mode)


def restore(image_dir, pid, gpu_only=True, concurrent=True, socket=None):
    """Starts restoring a process's GPU state (gpu_only=False: the whole process); returns an OperationHandle.

    GPU-only restores are in place: the live session of `pid` is rolled back
    to the image (phosd verifies every checksum first and leaves the process
    untouched when one fails).

    Args:
        image_dir: the image (OperationResult.image_dir of a checkpoint).
        pid: the running process to roll back.
        gpu_only: restore the GPU state only. False: recreate the process of
            a whole-process image with its old pid (CRIU; phosd must run as
            root; `pid` is not used by phosd then but must still be a
            positive int). The request does not detach: wait() returns only
            once the restored process has exited (at once if phosd cannot
            reap it); meanwhile .progress.phase is "running" (its message
            names the pid). OperationResult.pid is the restored process's
            pid; its exit status is not reported in OperationResult.
        concurrent: True: the process resumes at once and buffers load in the
            background in the order it first uses them; False: it waits until
            everything is loaded (stop-the-world).
        socket: phosd's control socket (default as for checkpoint()).

    Raises:
        ValueError: pid is not a positive int.
        PhosError: UNAVAILABLE when no phosd answers (at once); the
            operation's failures (NOT_FOUND, DATA_LOSS for a corrupt image, ...)
            come from wait().
    """
    pid = _check_pid(pid)
    req = pb.RestoreRequest(image_dir=os.path.normpath(os.path.abspath(os.fspath(image_dir))), pid=pid,
                            gpu_only=bool(gpu_only), concurrent=bool(concurrent))
    return _start("Restore", req, socket, pid, "concurrent" if concurrent else "stop-the-world")
