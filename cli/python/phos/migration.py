"""Live migration to another phosd (docs/migration.md): what `phos migrate` does.

The local phosd does the work (recopy rounds while the app runs, the
freeze, the CRIU dump, the transfer, the restore at the destination); the
SDK starts it and follows its stream (OperationHandle, handle.py).
"""
import dataclasses
import os
import stat
from typing import Dict, Tuple

from ._stubs import pb
from .handle import check_pid, start

_MODES = {"recopy": pb.MODE_RECOPY, "stop": pb.MODE_STOP}


@dataclasses.dataclass(frozen=True)
class MigrationResult:
    """What a finished migration reports (handle.wait() of phos.migrate).

    pid: the process's new pid at the destination.
    source_pid: the pid it had here (ended once the destination ran it).
    destination: the destination phosd's HOST:PORT.
    downtime_us: from the freeze here to running there, in microseconds.
    mode: "recopy" or "stop", as requested.
    total_ms: the whole migration, in milliseconds.
    bytes_sent: bytes of the image sent (GPU state + CRIU images).
    image_dir: the image at the destination, "HOST:PORT:incoming/NAME".
    counters: criu_dump_ms, transfer_ms, destination_criu_restore_ms,
        destination_gpu_restore_us, dirty_bytes_at_stop, recopy_rounds,
        gpu_bytes, precopy_bytes_sent, bytes_after_stop, lazy_pages_ms, ...
        (docs/migration.md); a job's: ranks, downtime_us, cut_us,
        transfer_ms.
    operation_id: phosd's id of the operation.
    rank_pids: a job migration (job=True): every rank's pid where it runs
        now, in rank order. Empty otherwise.
    """
    pid: int
    source_pid: int
    destination: str
    downtime_us: int
    mode: str
    total_ms: int
    bytes_sent: int
    image_dir: str
    counters: Dict[str, int]
    operation_id: int
    rank_pids: Tuple[int, ...] = ()


def load_peer_token(path):
    """The peer token in the file at `path`: its first line, whitespace-trimmed.

    The same checks as phos and phosd (daemon/peer/peer_token.cc): the file
    must exist, be a regular file, be private to its owner (no group or
    other permission bit: whoever reads the token can push images to the
    destination) and hold a non-empty first line. Raises ValueError saying
    which, and what to do.
    """
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError("peer token file %s does not exist" % path) from None
    except OSError as e:
        raise ValueError("peer token file %s: %s" % (path, e.strerror)) from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("peer token file %s is not a regular file" % path)
    if st.st_mode & 0o077:
        who = [w for w, bits in (("group", stat.S_IRGRP | stat.S_IWGRP), ("others", stat.S_IROTH | stat.S_IWOTH))
               if st.st_mode & bits]
        readable = bool(st.st_mode & (stat.S_IRGRP | stat.S_IROTH))
        raise ValueError("peer token file %s is %s by %s (mode %04o); make it private: chmod 600 %s" %
                         (path, "readable" if readable else "accessible", " and ".join(who) or "group or others",
                          stat.S_IMODE(st.st_mode), path))
    with open(path, "r", errors="replace") as f:
        token = f.readline().strip()
    if not token:
        raise ValueError("peer token file %s is empty (its first line is the token)" % path)
    return token


def _non_negative_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("%s must be an int >= 0 (got %r)" % (name, value))
    return value


def migrate(pid, to, peer_token_file=None, mode="recopy", rounds=0, max_rate=0, socket=None, *, peer_token=None,
            no_precopy=False, lazy_pages=False, job=False, phosd_map=None):
    """Starts live-migrating the process `pid` (running under `phos run`) to
    the phosd at `to`; returns an OperationHandle whose wait() gives a
    MigrationResult (pid: the new pid there, source_pid, downtime_us, ...).

    The process keeps running here during the recopy rounds, is then frozen,
    dumped (GPU state + CRIU; phosd must run as root), sent and restored at
    the destination; it is killed here only once the destination runs it.
    On any failure it resumes here (wait() raises PhosError saying why).

    Args:
        pid: the process.
        to: the destination phosd's peer address, "HOST:PORT" (`phos daemon
            --listen HOST:PORT --peer-token FILE`).
        peer_token_file: the file holding the destination's peer token
            (mode 0600; the checks of load_peer_token()).
        mode: "recopy" (default: copy rounds while the app runs, then the
            freeze) or "stop" (freeze first).
        rounds: most recopy rounds before the freeze (0: phosd's
            --recopy-rounds).
        max_rate: cap on the transfer, bytes per second (0: none).
        socket: the local phosd's control socket; default $PHOS_SOCKET, else
            /run/phos/phosd.sock.
        peer_token: the token itself, instead of peer_token_file (exactly one
            of them).
        no_precopy: recopy mode: do not stream the rounds' copies to the
            destination while the app runs; the whole image travels after
            the freeze (longer downtime; a baseline for comparisons).
        lazy_pages: CRIU's lazy migration: the process's memory is not in
            the downtime; it runs at the destination at once and its pages
            are faulted in from here (`phos migrate --lazy-pages`;
            counters["lazy_pages_ms"]: until the last one arrived).
        job: move the whole NCCL job `pid` is a rank of (`phos migrate
            --job`): one job checkpoint at a consistent cut, every rank
            ended once it is committed, the image sent, every rank restored
            at its destination; on failure restored where it ran (wait()
            raises, saying so). This phosd's ranks go to `to`.
        phosd_map: job=True, a job across phosds (--etcd): {"HOST:PORT" of
            another phosd running ranks: "HOST:PORT" they go to} (the same
            address leaves them there); checked before any rank is held.

    Raises:
        ValueError: a bad argument (unknown mode, pid not a positive int, `to`
            without a port, no or both tokens, a token file that is missing,
            empty or readable by others).
        PhosError: UNAVAILABLE when the local phosd does not answer (at once);
            the migration's failures (NOT_FOUND: no session for the pid;
            UNAUTHENTICATED: a wrong token; UNAVAILABLE: the destination
            cannot be reached, ...) come from wait().
    """
    pid = check_pid(pid)
    if not isinstance(to, str) or ":" not in to:
        raise ValueError("to must be the destination's HOST:PORT (got %r)" % (to,))
    if mode not in _MODES:
        raise ValueError("mode must be one of %s (got %r)" % (", ".join(sorted(_MODES)), mode))
    _non_negative_int("rounds", rounds)
    _non_negative_int("max_rate", max_rate)
    if (peer_token_file is None) == (peer_token is None):
        raise ValueError("give the destination's peer token: peer_token_file=FILE (or peer_token=TOKEN), one of them")
    if peer_token is None:
        peer_token = load_peer_token(peer_token_file)
    elif not isinstance(peer_token, str) or not peer_token.strip():
        raise ValueError("peer_token must be a non-empty str")
    if phosd_map and not job:
        raise ValueError("phosd_map moves the ranks of a job across phosds: it needs job=True")
    if job and lazy_pages:
        raise ValueError("a job migration ends its ranks before the transfer: lazy_pages is for one process")
    req = pb.MigrateRequest(pid=pid, destination=to, mode=_MODES[mode], max_precopy_rounds=rounds,
                            peer_token=peer_token.strip(), max_bytes_per_sec=max_rate,
                            no_precopy=bool(no_precopy), lazy_pages=bool(lazy_pages), job=bool(job))
    for source, destination in (phosd_map or {}).items():
        if not all(isinstance(v, str) and ":" in v for v in (source, destination)):
            raise ValueError('phosd_map maps "HOST:PORT" to "HOST:PORT" (got %r: %r)' % (source, destination))
        req.phosd_map[source] = destination

    def result(done, operation_id):
        c = dict(done.counters)
        return MigrationResult(pid=done.pid, source_pid=int(c.get("source_pid", pid)), destination=to,
                               downtime_us=int(c.get("downtime_us", done.stall_us)), mode=mode,
                               total_ms=done.total_ms, bytes_sent=done.bytes_written, image_dir=done.image_dir,
                               counters=c, operation_id=operation_id, rank_pids=tuple(done.rank_pids))

    return start("Migrate", req, socket, pid, mode, make_result=result)
