"""Following a long operation phosd streams: OperationHandle and what it reports.

phosd answers Checkpoint, Restore, Migrate, TemplateSave and TemplateStart
with a stream of OperationEvents: progress events, then exactly one terminal
event holding the result or the error (proto/phos.proto). A handle reads
that stream on a background thread, so the caller (a training loop, a
serverless control plane) keeps running and looks at the handle when it
likes.

A restore of a whole process or a template start that does not detach keeps
its stream open while the process runs: a progress event of phase "running"
("restored pid N" / "started pid N") comes as soon as it runs, the result
once it has exited, with its exit status. The handle exposes that pid at once
(running_pid, wait_running()).
"""
import dataclasses
import re
import threading
from typing import Callable, Dict, List, Optional, Tuple

import grpc

from . import _channel
from .errors import PhosError

# The phase of the progress event that names a restored / started process
# (daemon/server/checkpoint_rpcs.cc, template_rpcs.cc).
RUNNING_PHASE = "running"
_RUNNING_PID = re.compile(r"\bpid (\d+)")


@dataclasses.dataclass(frozen=True)
class Progress:
    """One progress event. phase is a short word ("quiesce", "copy", "commit",
    "running", ...); message is for humans; bytes_total is 0 when a phase
    moves no data."""
    phase: str
    message: str
    bytes_done: int
    bytes_total: int
    elapsed_ms: int
    bytes_per_second: float


@dataclasses.dataclass(frozen=True)
class OperationResult:
    """What a finished checkpoint, restore, template save or template start reports.

    image_dir: the image written (checkpoint), read (restore), the template's
        directory (template save) or where the instance was read from
        (template start).
    pid: the process the operation was on; for a whole-process restore or a
        template start, the process it created.
    mode: "cow", "recopy" or "stop" for a checkpoint or template save;
        "concurrent" or "stop-the-world" for a restore (as requested);
        "detached" or "attached" for a template start.
    stall_us: how long the application was stopped, in microseconds.
    total_ms: the whole operation, in milliseconds (for a restore or start
        that did not detach: until the process ran).
    bytes_written: bytes of GPU state saved or loaded.
    counters: the operation's engine counters (shadows, copier_yields,
        recopy_rounds, criu_restore_ms, ...; docs/protocols.md,
        docs/templates.md).
    operation_id: phosd's id of the operation.
    exit_status: a whole-process restore or a template start that did not
        detach: the process's exit status (its exit code, or 128 + the
        signal that ended it). None otherwise, and when phosd could not reap
        the process (it is not its subreaper: then wait() returns while the
        process may still run).
    rank_pids: an NCCL job's checkpoint or restore: every rank's pid, in
        rank order (a restore's: the restored processes). Empty otherwise.
    """
    image_dir: str
    pid: int
    mode: str
    stall_us: int
    total_ms: int
    bytes_written: int
    counters: Dict[str, int]
    operation_id: int
    exit_status: Optional[int] = None
    rank_pids: Tuple[int, ...] = ()


def operation_result(done, operation_id, pid, mode):
    """OperationResult of a `done` event (proto OperationResult); `pid` when it names none."""
    exit_status = done.exit_status if done.HasField("exit_status") else None
    return OperationResult(done.image_dir, done.pid or pid, mode, done.stall_us, done.total_ms, done.bytes_written,
                           dict(done.counters), operation_id, exit_status, tuple(done.rank_pids))


class OperationHandle:
    """An operation in flight (returned by phos.checkpoint, phos.restore,
    phos.migrate, phos.template_save and phos.template_start(detach=False)).

    The operation runs in phosd; this handle follows it. Dropping the handle
    does not cancel the operation (phosd completes it either way).
    """

    def __init__(self, rpc, channel, call, pid, mode, *, subject=None,
                 make_result: Optional[Callable[[object, int], object]] = None):
        """rpc: the RPC's name; channel/call: the open stream (the handle closes
        the channel); pid and mode go into the default OperationResult;
        subject: what the operation is on, for messages ("pid 12",
        "template fn"); make_result(done, operation_id) builds the result of
        the terminal `done` event (default: an OperationResult); every result
        has a `pid`."""
        self._rpc = rpc
        self._pid = pid
        self._mode = mode
        self._subject = subject or "pid %d" % pid
        self._make_result = make_result or (lambda done, op_id: operation_result(done, op_id, pid, mode))
        self._finished = threading.Event()
        self._running = threading.Event()  # set with _running_pid, or at the end
        # Written by the reader thread only; read by anyone under _lock.
        self._lock = threading.Lock()
        self._progress = None
        self._phases = []  # each phase once, in the order it first came
        self._running_pid = None
        self._result = None
        self._error = None
        self._operation_id = None
        self._thread = threading.Thread(target=self._read, args=(channel, call),
                                        name="phos-%s-%s" % (rpc.lower(), self._subject.replace(" ", "-")),
                                        daemon=True)
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
                    m = _RUNNING_PID.search(p.message) if p.phase == RUNNING_PHASE else None
                    with self._lock:
                        self._progress = Progress(p.phase, p.message, p.bytes_done, p.bytes_total, p.elapsed_ms,
                                                  p.bytes_per_second)
                        if p.phase not in self._phases:
                            self._phases.append(p.phase)
                        if m:
                            self._running_pid = int(m.group(1))
                    if m:
                        self._running.set()
                elif kind == "done":
                    result = self._make_result(event.done, event.operation_id)
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
            # No `running` event (detached, or phosd is not the process's
            # reaper): the result names the process.
            if self._running_pid is None and result is not None and result.pid:
                self._running_pid = result.pid
        self._finished.set()
        self._running.set()

    def done(self):
        """True once the operation finished (successfully or not)."""
        return self._finished.is_set()

    @property
    def progress(self) -> Optional[Progress]:
        """The latest Progress phosd reported, or None before the first."""
        with self._lock:
            return self._progress

    @property
    def phases(self) -> List[str]:
        """The phases of the progress events so far, each once, in the order
        each first came (e.g. ["criu-restore", "running", "load"]).

        Events of different phases may interleave (a concurrent restore's
        "load" events go on after its "running" event): ask whether a phase
        was reported here, not which came last (progress)."""
        with self._lock:
            return list(self._phases)

    @property
    def operation_id(self) -> Optional[int]:
        """phosd's id of the operation, once its first event arrived."""
        with self._lock:
            return self._operation_id

    @property
    def running_pid(self) -> Optional[int]:
        """For a whole-process restore or a template start: the pid of the
        process it created, as soon as phosd reported it running (its
        `running` event) or, without one, once the result came. None before,
        and after a failure. Other operations: the result's pid once done
        (phos.migrate: the new pid at the destination)."""
        with self._lock:
            return self._running_pid

    def wait_running(self, timeout=None) -> int:
        """Blocks until running_pid is known and returns it: for a restore or
        template start that did not detach, as soon as the process runs
        (long before wait() returns, which waits for its exit).

        Raises:
            PhosError: the operation failed before the process ran.
            TimeoutError: not running after `timeout` seconds (None: no limit).
        """
        if not self._running.wait(timeout):
            raise TimeoutError("phos %s of %s not running after %s s" % (self._rpc.lower(), self._subject, timeout))
        with self._lock:
            if self._running_pid is not None:
                return self._running_pid
            if self._error is not None:
                raise self._error
        raise PhosError(grpc.StatusCode.INTERNAL, "phosd reported no pid for the %s" % self._rpc, self._rpc)

    def wait(self, timeout=None):
        """Blocks until the operation finished and returns its result: an
        OperationResult (phos.migrate: a MigrationResult). For a restore of a
        whole process or a template start that did not detach, that is once
        the process has exited; result.exit_status is its exit status.

        Args:
            timeout: seconds to wait at most (None: as long as it takes).

        Raises:
            PhosError: the operation failed or phosd refused it (e.g. NOT_FOUND:
                no session for the pid, not a whole-process image, no such
                template; DATA_LOSS: a corrupt image).
            TimeoutError: still running after `timeout` seconds (the operation
                goes on; call wait() again).
        """
        if not self._finished.wait(timeout):
            raise TimeoutError("phos %s of %s still running after %s s" % (self._rpc.lower(), self._subject, timeout))
        with self._lock:
            if self._error is not None:
                raise self._error
            return self._result

    def __repr__(self):
        state = "done" if self.done() else "running"
        return "<phos.OperationHandle %s %s %s>" % (self._rpc.lower(), self._subject, state)


def check_pid(pid):
    """pid if it is a positive int (a pid_t), else ValueError."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31:
        raise ValueError("pid must be a positive int (got %r)" % (pid,))
    return pid


def start(rpc, request, socket, pid, mode, **handle_args):
    """Opens the stream of `rpc` on phosd at `socket` and returns its OperationHandle."""
    channel, stub = _channel.connect(socket, rpc)
    try:
        call = getattr(stub, rpc)(request)
    except BaseException:
        channel.close()
        raise
    return OperationHandle(rpc, channel, call, pid, mode, **handle_args)
