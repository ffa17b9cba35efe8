#!/usr/bin/env python3
"""Seeds for data_channel_fuzz: data channel streams (daemon/peer/data_channel.h)
encoded by hand (protobuf wire format of proto/peer.proto's ImageChunk)."""
import os
import struct
import sys


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def frame(msg):
    return struct.pack("<Q", len(msg)) + msg


def begin(name, total, files):
    return field(1, 2, field(1, 2, name) + field(2, 0, total) + field(3, 0, files))


def data_header(path, offset, raw):
    return field(2, 2, field(1, 2, path) + field(2, 0, offset) + field(5, 0, raw))


def file_end(path, size, xxh3):
    return field(3, 2, field(1, 2, path) + field(2, 0, size) + field(3, 0, xxh3))


def end(files, total):
    return field(4, 2, field(1, 0, files) + field(2, 0, total))


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    body = b"hello, data channel"
    seeds = {
        "stream": frame(begin(b"img", len(body), 1)) + frame(data_header(b"gpu.img", 0, len(body))) + body
        + frame(file_end(b"gpu.img", len(body), 0)) + frame(end(1, len(body))),
        "raw_beside_data": frame(field(2, 2, field(1, 2, b"f") + field(3, 2, b"abc") + field(5, 0, 3))) + b"abc",
        "huge_length": struct.pack("<Q", 1 << 62),
        "truncated_raw": frame(data_header(b"f", 0, 1000)) + b"short",
    }
    for name, blob in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "data_channel"))
