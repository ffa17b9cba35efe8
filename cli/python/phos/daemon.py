"""Unary queries: daemon status and the sessions it serves."""
from ._channel import QUERY_TIMEOUT_S, call  # noqa: F401  (QUERY_TIMEOUT_S was defined here first)
from ._convert import message_to_dict
from ._stubs import pb


def status(socket=None):
    """phosd's status, as a dict (the fields of StatusReply in proto/phos.proto).

    Keys: version, backend ("cuda" or "sim"), backend_detail, gpus (list of
    dicts: ordinal, name, total_memory_bytes, ...), uptime_ms, daemon_pid,
    socket_path, session_count, counters (dict name -> count).

    Args:
        socket: phosd's control socket; default $PHOS_SOCKET, else
            /run/phos/phosd.sock (the CLI's default).

    Raises:
        PhosError: UNAVAILABLE when no daemon answers on the socket.
    """
    return message_to_dict(call("Status", "Status", pb.StatusRequest(), socket))


def sessions(socket=None, pid=None):
    """The sessions (processes running under `phos run`) phosd serves, as a list
    of dicts (SessionInfo in proto/phos.proto): session_id, pid, command, device,
    device_memory_bytes, buffer_count, state ("running", "checkpointing",
    "restoring", ...), started_unix_ms, calls_exact, calls_speculated,
    calls_unvalidatable, counters.

    Args:
        socket: phosd's control socket (default as for status()).
        pid: only the session of this process (default: all).
    """
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
        raise ValueError("pid must be a positive int (got %r)" % (pid,))
    reply = call("ListSessions", "ListSessions", pb.ListSessionsRequest(pid=pid or 0), socket)
    return [message_to_dict(s) for s in reply.sessions]
