"""Finding and connecting to phosd's control socket, as the CLI does
(cli/client.cc ConnectToDaemon, daemon/server/daemon_options.cc)."""
import os
import stat

import grpc

from ._stubs import pb_grpc
from .errors import PhosError

# Status and ListSessions answer from memory; a daemon that takes longer is stuck.
QUERY_TIMEOUT_S = 10.0

# daemon/server/daemon_options.h kDefaultSocketPath.
DEFAULT_SOCKET_PATH = "/run/phos/phosd.sock"
# The CLI's connect timeout (cli/commands.h GlobalOptions::connect_timeout_ms).
CONNECT_TIMEOUT_S = 2.0


def default_socket():
    """$PHOS_SOCKET if set and non-empty, else /run/phos/phosd.sock (the CLI's
    and phosd's default)."""
    env = os.environ.get("PHOS_SOCKET")
    return env if env else DEFAULT_SOCKET_PATH


def _how_to_start(path):
    return ("start one with `phos daemon --socket %s` (or point socket= / $PHOS_SOCKET at a "
            "running daemon)" % path)


def connect(socket=None, rpc=None, timeout_s=CONNECT_TIMEOUT_S):
    """Returns (channel, stub) for phosd on `socket` (default: default_socket()).

    Raises PhosError(UNAVAILABLE) when nothing answers there within timeout_s.
    The caller owns the channel and closes it."""
    path = os.fspath(socket) if socket is not None else default_socket()
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise PhosError(grpc.StatusCode.UNAVAILABLE,
                        "no phosd running: socket %s does not exist; %s" % (path, _how_to_start(path)), rpc)
    if not stat.S_ISSOCK(mode):
        raise PhosError(grpc.StatusCode.UNAVAILABLE,
                        "%s exists but is not a socket; %s" % (path, _how_to_start(path)), rpc)
    channel = grpc.insecure_channel("unix:" + os.path.abspath(path))
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        channel.close()
        raise PhosError(grpc.StatusCode.UNAVAILABLE,
                        "no phosd answering on %s (stale socket or permission denied: the socket is mode "
                        "0660, run as its owner or group); %s" % (path, _how_to_start(path)), rpc)
    return channel, pb_grpc.PhosStub(channel)


def call(rpc, method_name, request, socket, timeout_s=QUERY_TIMEOUT_S):
    """One unary RPC on a channel of its own; its reply. Failures raise PhosError."""
    channel, stub = connect(socket, rpc)
    try:
        return getattr(stub, method_name)(request, timeout=timeout_s)
    except grpc.RpcError as e:
        raise PhosError.from_rpc_error(rpc, e) from None
    finally:
        channel.close()
