#!/usr/bin/env python3
"""Seeds for session_sections_fuzz: image.v1.Manifest protobufs
(proto/image.proto), hand-encoded, of a session of one GPU and of a session
of two GPUs (a buffer, a stream, an event and a module variable on its
second GPU), as ReadSessionSections accepts them."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from make_collective_seeds import field  # noqa: E402


def range_record(address, size):
    return field(1, address) + field(2, size)


def manifest(device, other_devices=(), buffer_devices=(), stream_device=None, global_device=None, aliases=()):
    # SessionIndex (Manifest.session = 26): two buffers, a global, streams
    # 1-2, event 3, module 1, function 4 of module 1.
    index = (field(1, range_record(0x10000, 4096)) + field(1, range_record(0x20000, 4096)) +
             field(2, range_record(0x30000, 16)) + field(3, 1) + field(3, 2) + field(4, 3) + field(5, 1) +
             field(6, field(1, 4) + field(2, 1)))
    stream2 = field(1, 2) + (field(4, stream_device) if stream_device is not None else b"")
    glob = field(1, 0x30000) + field(2, 16) + field(3, 1) + field(4, b"g_per_gpu") + field(5, 1)
    if global_device is not None:
        glob += field(6, global_device)
    handles = (field(1, 1) + field(2, field(1, 1)) + field(2, stream2) + field(3, field(1, 3)) +
               field(4, field(1, 4) + field(2, 1) + field(3, b"_Z6kernelPf")) + field(5, glob) + field(6, 1) +
               field(9, device))
    for d in other_devices:
        handles += field(11, d)
    for address, d in buffer_devices:
        handles += field(12, field(1, address) + field(2, d))
    for app, phosd in aliases:
        handles += field(13, field(1, app) + field(2, phosd))
    modules = field(1, field(1, 1) + field(2, b"\x7fELF-module-image"))
    return field(26, index) + field(21, handles) + field(22, modules)


SEEDS = {
    "one-gpu": manifest(0),
    "two-gpus": manifest(0, [1], [(0x20000, 1)], stream_device=1, global_device=1),
    "two-gpus-restored": manifest(2, [1], [(0x20000, 1)], stream_device=1, aliases=[(0, 2)]),
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "sections")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
