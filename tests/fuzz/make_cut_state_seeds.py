#!/usr/bin/env python3
"""Seeds for cut_state_fuzz: CutStates (proto/peer.proto) of two phosds of
a 4-rank job, hand-encoded, each behind its 2-byte length."""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
from make_collective_seeds import field  # noqa: E402


def counts(rank, collectives, sent=None, received=None, nranks=4):
    body = field(1, bytes(128)) + field(2, nranks) + field(3, rank) + field(4, collectives)
    for peer, n in (sent or {}).items():
        body += field(5, field(1, peer) + field(2, n))
    for peer, n in (received or {}).items():
        body += field(6, field(1, peer) + field(2, n))
    return body


def state(ranks, held):
    return b"".join(field(1, counts(*r)) for r in ranks) + field(2, int(held))


def framed(*states):
    return b"".join(struct.pack("<H", len(s)) + s for s in states)


SEEDS = {
    "at-cut": framed(state([(0, 7), (1, 7)], True), state([(2, 7), (3, 7)], True)),
    "behind": framed(state([(0, 9), (1, 7)], False), state([(2, 8), (3, 9)], True)),
    "sends": framed(state([(0, 3, {1: 2}, {3: 1})], True), state([(1, 3, {}, {0: 2}), (3, 3, {0: 1})], True)),
    "twice": framed(state([(0, 1)], True), state([(0, 1)], True)),
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "cut_state")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
