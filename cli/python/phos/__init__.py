"""phos: checkpoint and restore running GPU processes from Python.

Talks to phosd, the phos daemon, over its gRPC control socket
(proto/phos.proto), like the `phos` command does. docs/python-sdk.md.

    import phos
    handle = phos.checkpoint(mode="cow")      # this process, while it keeps running
    ...                                       # train on
    result = handle.wait()                    # result.image_dir, result.stall_us
    phos.restore(result.image_dir, pid=os.getpid()).wait()

    per_hour = phos.optimal_frequency(n_gpus=1024, failures_per_gpu_hour=1e-3,
                                      overhead_s=result.stall_us / 1e6)

    phos.template_save("fn", pid=worker).wait()   # serverless: a warm process as a template
    pid = phos.template_start("fn")               # a new instance, running
    moved = phos.migrate(pid, "10.0.0.2:7070", peer_token_file="/etc/phos/peer-token").wait()
"""
import pkgutil

# The generated stubs (phos._proto) may live in another directory on sys.path
# (a CMake build dir: build/cli/python/gen/phos/_proto); let them join this
# package. An installed package holds them itself and this changes nothing.
__path__ = pkgutil.extend_path(__path__, __name__)

from ._channel import DEFAULT_SOCKET_PATH, default_socket  # noqa: E402
from .daemon import sessions, status  # noqa: E402
from .errors import PhosError  # noqa: E402
from .frequency import optimal_frequency, optimal_interval_s  # noqa: E402
from .handle import OperationHandle, OperationResult, Progress  # noqa: E402
from .migration import MigrationResult, load_peer_token, migrate  # noqa: E402
from .operations import checkpoint, restore  # noqa: E402
from .templates import template_list, template_remove, template_save, template_start  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "checkpoint", "restore", "status", "sessions", "optimal_frequency", "optimal_interval_s",
    "template_save", "template_start", "template_list", "template_remove", "migrate", "load_peer_token",
    "OperationHandle", "OperationResult", "MigrationResult", "Progress", "PhosError", "default_socket",
    "DEFAULT_SOCKET_PATH",
]
