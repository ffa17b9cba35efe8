#!/usr/bin/env python3
"""Seeds for collective_message_fuzz: well-formed CollectiveMessages
(proto/peer.proto), hand-encoded, behind the fuzzer's mode byte."""
import os
import struct
import sys


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, value):
    if isinstance(value, bytes):
        return varint(num << 3 | 2) + varint(len(value)) + value
    return varint(num << 3) + varint(value)


def message(kind, nranks=2, frm=1, to=0, seq=0, op_kind=0, datatype=7, redop=0, scalar=0, peer=0, count=4,
            data=b"", why=b""):
    comm = bytes(128)
    return b"".join([field(1, kind), field(2, comm), field(3, nranks), field(4, frm), field(5, to), field(6, seq),
                     field(7, op_kind), field(8, datatype), field(9, redop), field(10, scalar), field(11, peer),
                     field(12, count), field(13, data), field(14, why)])


SEEDS = {
    "allreduce": b"\x00" + message(0, count=4, data=struct.pack("<4f", 1, 2, 3, 4)),
    "premulsum": b"\x00" + message(0, redop=255, scalar=struct.unpack("<I", struct.pack("<f", 2.0))[0], count=2,
                                   data=struct.pack("<2f", 1, 2)),
    "broadcast-root": b"\x00" + message(0, op_kind=1, peer=1, count=2, data=struct.pack("<2f", 5, 6)),
    "allgather": b"\x00" + message(0, op_kind=3, count=2, data=struct.pack("<2f", 7, 8)),
    "send": b"\x00" + message(1, op_kind=5, peer=0, to=0, count=3, data=struct.pack("<3f", 1, 1, 1)),
    "abort": b"\x00" + message(2, why=b"rank 1: its process ended"),
    "unknown-comm": b"\x01" + message(0, count=1, data=struct.pack("<f", 1)),
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "collective")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
