#!/usr/bin/env python3
"""Writes the seed corpus of dispatch_fuzz (tests/fuzz/corpus/dispatch/).

The record format is dispatch_fuzz.cc's (front to back, little-endian):
u8 selector (a row of interposer/protocol/calls.def), u8 flags, u16 length,
payload, and for staged records u8 chunk, u32 bytes, u64 offset, piece.
Pointers use the fuzzer's markers: 0xA0A0/0xA1A1 (the session's buffers),
0xB0B0 (another session's buffer), 0xC0C0 (its pinned segment), 0xC1C1
(where segments the input registers go). A host segment registration may
first send its channel record (segment_mode: bit 0 sealed, 1 mismatched,
2 bad magic, 3 no fd).
Run from anywhere: python3 tests/fuzz/make_dispatch_seeds.py
"""
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ROWS = [m.group(1) for m in re.finditer(r"^PHOS_CALL\((\w+),",
        open(os.path.join(ROOT, "interposer/protocol/calls.def")).read(), re.M)]

A0, A1, B0, C0, C1 = 0xA0A0 << 48, 0xA1A1 << 48, 0xB0B0 << 48, 0xC0C0 << 48, 0xC1C1 << 48
NO_CHUNK = 0xFFFFFFFF
H2D, D2H, D2D, P2D, D2P = 1, 2, 3, 4, 5


def rec(op, payload=b"", call=True, stream=0, staging=None, segment_mode=None):
    flags = (1 if call else 0) | (2 if staging else 0) | ((stream & 3) << 2)
    flags |= 0x40 if segment_mode is not None else 0
    out = struct.pack("<BBH", ROWS.index(op), flags, len(payload)) + payload
    if segment_mode is not None:
        out += struct.pack("<B", segment_mode)
    if staging:
        chunk, offset, piece = staging
        out += struct.pack("<BIQ", chunk, len(piece), offset) + piece
    return out


def memcpy(dst, src, n, d, chunk=NO_CHUNK):
    return struct.pack("<QQQII", dst, src, n, d, chunk)


def memset(dst, count, value, size):
    return struct.pack("<QQII", dst, count, value, size)


def memcpy2d(dst, src, dpitch, spitch, w, h, d, off=0, packed=0, chunk=NO_CHUNK):
    return struct.pack("<QQQQQQQQII", dst, src, dpitch, spitch, w, h, off, packed, d, chunk)


def memset2d(dst, pitch, w, h, value):
    return struct.pack("<QQQQII", dst, pitch, w, h, value, 0)


SAXPY = b""".version 8.0
.target sm_90
.address_size 64
.visible .global .align 4 .u32 phos_counter = 7;
.visible .entry saxpy(.param .u64 x, .param .u64 y, .param .f32 a, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
\0"""


def name_req(fmt, *fields, name):
    return struct.pack(fmt, *fields) + name


def texture(base, width, kind_resource, flags=0, dims=1, height=1, pitch=None):
    """A wire::TextureDesc (protocol/texture_desc.h): float texels, 1 channel."""
    pitch = width * 4 if pitch is None else pitch
    return struct.pack("<QQQIIIIIBBBBBBBBffff", base, pitch, 0, width, height, 1, 0, flags, dims, 1, 4, 2,
                       kind_resource, 1, 1, 1, 0.0, 0.0, 0.0, 1.0) + bytes(4)


def nccl_op(kind, dtype, send, recv, count, redop=0, peer=0, scalar=0, scalar_value=0):
    """A wire::NcclOp (protocol/nccl_wire.h)."""
    return struct.pack("<BBBBiQQQQ", kind, dtype, redop, scalar, peer, send, recv, count, scalar_value)


def nccl_group(comm, *ops):
    return struct.pack("<II", comm, len(ops)) + b"".join(ops)


VMM = 0x7c0000000000 + (1 << 30)
NCCL_ID = b"phosnccl" + bytes(range(120))
ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, SEND, RECV = range(7)
FLOAT32, FLOAT16 = 7, 6

SEEDS = {
    "copies": [
        rec("Memcpy", memcpy(A0 + 16, 0, 64, H2D) + bytes(range(64))),
        rec("Memcpy", memcpy(0, A0 + 16, 64, D2H)),
        rec("MemcpyAsync", memcpy(A1, A0, 4096, D2D), call=False),
        rec("MemcpyAsync", memcpy(A1 + 8, C0 + 64, 512, P2D), call=False, stream=0),
        rec("Memcpy", memcpy(C0 + 4096, A1, 1024, D2P)),
        rec("Memcpy", memcpy(0, B0, 32, D2H)),
        rec("Memcpy", memcpy(0, A1, 1 << 16, D2H, chunk=1)),
    ],
    "memsets": [
        rec("Memset", memset(A0, 100, 0x55, 1)),
        rec("MemsetAsync", memset(A1 + 4, 64, 0x1234, 2), call=False),
        rec("Memset2D", memset2d(A1, 512, 100, 8, 7)),
        rec("Memset2DAsync", memset2d(A0, 64, 64, 64, 9), call=False),
        rec("Memcpy2D", memcpy2d(A1 + 4096, A0, 256, 64, 32, 16, D2D)),
        rec("Memcpy2D", memcpy2d(0, A1, 0, 256, 16, 4, D2H, 0, 64)),
        rec("Memcpy2D", memcpy2d(A1, 0, 128, 0, 8, 4, H2D) + bytes(32)),
        rec("Memcpy2DAsync", memcpy2d(C0, A1, 100, 64, 50, 8, D2P), call=False),
        rec("Memset", memset(B0, 16, 1, 4)),
    ],
    "streams": [
        rec("StreamCreate", struct.pack("<IIiI", 1, 1, 0, 0)),
        rec("EventCreate", struct.pack("<II", 7, 0)),
        rec("EventCreate", struct.pack("<II", 8, 0)),
        rec("EventRecord", struct.pack("<II", 7, 0), call=False, stream=1),
        rec("MemsetAsync", memset(A0, 256, 3, 4), call=False, stream=1),
        rec("EventRecord", struct.pack("<II", 8, 0), call=False, stream=1),
        rec("StreamWaitEvent", struct.pack("<II", 8, 0), call=False, stream=0),
        rec("EventSynchronize", struct.pack("<II", 8, 0)),
        rec("EventElapsedTime", struct.pack("<II", 7, 8)),
        rec("StreamQuery", stream=1),
        rec("StreamSynchronize", stream=1),
        rec("EventDestroy", struct.pack("<II", 7, 0)),
        rec("StreamDestroy", struct.pack("<II", 1, 0)),
    ],
    "module": [
        rec("ModuleLoad", struct.pack("<IIQ", 1, 1, len(SAXPY)) + SAXPY),
        rec("ModuleGetFunction", name_req("<IIII", 1, 3, 5, 0, name=b"saxpy")),
        rec("ModuleGetGlobal", name_req("<II", 1, 12, name=b"phos_counter")),
        rec("LaunchKernel", struct.pack("<IIIIIIIIII", 3, 1, 1, 1, 32, 1, 1, 0, 24, 0) +
            struct.pack("<QQfI", A0, A1, 2.0, 32), call=False),
        rec("FuncGetAttributes", struct.pack("<II", 3, 0)),
        rec("FuncSetAttribute", struct.pack("<IiiI", 3, 8, 1024, 0)),
        rec("DeviceSynchronize"),
        rec("ModuleUnload", struct.pack("<II", 1, 0)),
        rec("LaunchKernel", struct.pack("<IIIIIIIIII", 3, 1, 1, 1, 32, 1, 1, 0, 24, 0) +
            struct.pack("<QQfI", A0, B0, 2.0, 32), call=True),
    ],
    "staged": [
        rec("MemcpyAsync", memcpy(A1, 0, 4096, H2D), call=False, staging=(0, 512, bytes(range(256)) * 4)),
        rec("Memcpy2DAsync", memcpy2d(A1, 0, 256, 0, 64, 16, H2D), call=False, staging=(1, 0, bytes(1024))),
        rec("ModuleLoad", struct.pack("<IIQ", 2, 2, len(SAXPY)), call=False, staging=(2, 0, SAXPY)),
        rec("ModuleLoad", struct.pack("<IIQ", 2, 3, len(SAXPY))),
        rec("StreamSynchronize"),
        rec("Malloc", struct.pack("<Q", 1 << 16)),
        rec("Free", struct.pack("<Q", A0)),
        rec("Free", struct.pack("<Q", B0)),
    ],
    "segments": [
        rec("HostSegmentRegister", struct.pack("<QQQ", 5, 1 << 21, C1), segment_mode=1),
        rec("MemcpyAsync", memcpy(A1, C1 + 4096, 8192, P2D), call=False),
        rec("Memcpy2D", memcpy2d(C1 + 65536, A1, 256, 128, 100, 16, D2P)),
        rec("HostCopyStats"),
        rec("HostSegmentRegister", struct.pack("<QQQ", 5, 1 << 21, C1 + (4 << 20)), segment_mode=1),
        rec("HostSegmentRegister", struct.pack("<QQQ", 6, 1 << 21, C1 + (8 << 20)), segment_mode=0),
        rec("HostSegmentRegister", struct.pack("<QQQ", 7, 1 << 21, C1 + (8 << 20)), segment_mode=3),
        rec("HostSegmentRegister", struct.pack("<QQQ", 8, 1 << 21, C1 + (8 << 20))),
        rec("HostSegmentRegister", struct.pack("<QQQ", 9, 1 << 21, C0), segment_mode=1),
    ],
    "textures": [
        rec("CreateTextureObject", texture(A0, 64, 1)),
        rec("CreateSurfaceObject", texture(A1, 16, 0, dims=2, height=4, pitch=64)),
        rec("CreateTextureObject", texture(A1, 16, 0, flags=2 | 4, dims=2, height=4, pitch=64)),
        rec("CreateTextureObject", texture(B0, 8, 1)),
        rec("DestroyTextureObject", struct.pack("<Q", 1)),
        rec("DestroySurfaceObject", struct.pack("<Q", 1)),
        rec("DeviceSetLimit", struct.pack("<IIQ", 2, 0, 1 << 20)),
        rec("DeviceSetLimit", struct.pack("<IIQ", 1, 0, 4096)),
        rec("DeviceSetLimit", struct.pack("<IIQ", 7, 0, 1)),
    ],
    # The fuzzed app has no peers: a 1-rank communicator forms at once, a
    # larger one gives up (dispatch_fuzz.cc sets the session's stop flag).
    "nccl": [
        rec("SetDevice", struct.pack("<iI", 0, 0)),
        rec("SetDevice", struct.pack("<iI", 1, 0)),
        rec("NcclCommInitRank", struct.pack("<IiiI", 1, 1, 0, 0) + NCCL_ID),
        rec("NcclCommInitRank", struct.pack("<IiiI", 2, 2, 1, 0) + NCCL_ID),
        rec("NcclGroup", nccl_group(1, nccl_op(ALLREDUCE, FLOAT32, A0, A1, 64))),
        rec("NcclGroup", nccl_group(1, nccl_op(SEND, FLOAT32, A0, 0, 32), nccl_op(RECV, FLOAT32, 0, A1 + 256, 32))),
        rec("NcclGroup", nccl_group(1, nccl_op(BROADCAST, FLOAT16, A1, A1, 16), nccl_op(ALLGATHER, FLOAT32, A0, A1, 8),
                                    nccl_op(REDUCESCATTER, FLOAT32, A0, A1, 8, redop=2))),
        rec("NcclGroup", nccl_group(1, nccl_op(ALLREDUCE, FLOAT32, A0 + 64, A1, 8, redop=0xff, scalar=2,
                                               scalar_value=A0))),
        rec("NcclGroup", nccl_group(1, nccl_op(RECV, FLOAT32, 0, A1, 8))),
        rec("NcclGroup", nccl_group(1, nccl_op(9, FLOAT32, A0, A1, 8))),
        rec("NcclGroup", nccl_group(1, nccl_op(ALLREDUCE, FLOAT32, A0, B0, 8))),
        rec("NcclCommGetAsyncError", struct.pack("<II", 1, 0)),
        rec("NcclCommFinalize", struct.pack("<II", 1, 0)),
        rec("NcclCommAbort", struct.pack("<II", 1, 0)),
        rec("NcclCommDestroy", struct.pack("<II", 1, 0)),
    ],
    # The driver's virtual-memory API: a reserved range at a hinted address
    # in the sim's default address range (its base, 0x7c0000000000, + 1 GiB),
    # two mappings back to back, a memset across them, the refusals (cudaFree
    # of a mapping, freeing a range with mappings, mapping outside), unmaps.
    "vmm": [
        rec("MemAddressReserve", struct.pack("<QQQ", 8 << 20, 0, VMM)),
        rec("MemMap", struct.pack("<QQ", VMM, 2 << 20)),
        rec("MemMap", struct.pack("<QQ", VMM + (2 << 20), 2 << 20)),
        rec("Memset", memset(VMM + (1 << 20), 3 << 20, 0x42, 1)),
        rec("Memcpy", memcpy(0, VMM + (2 << 20) - 64, 128, D2H)),
        rec("MemMap", struct.pack("<QQ", VMM + (2 << 20), 2 << 20)),
        rec("MemMap", struct.pack("<QQ", A0, 2 << 20)),
        rec("Free", struct.pack("<Q", VMM)),
        rec("MemAddressFree", struct.pack("<QQ", VMM, 8 << 20)),
        rec("MemUnmap", struct.pack("<QQ", VMM + (2 << 20), 2 << 20)),
        rec("MemUnmap", struct.pack("<QQ", VMM, 1 << 20)),
        rec("MemUnmap", struct.pack("<QQ", VMM, 2 << 20)),
        rec("MemAddressFree", struct.pack("<QQ", VMM, 8 << 20)),
        rec("MemAddressReserve", struct.pack("<QQQ", 3 << 20, 3, 0)),
    ],
    "device": [
        rec("GetDeviceCount"),
        rec("GetDeviceProperties", struct.pack("<iI", 0, 3)),
        rec("DeviceGetAttribute", struct.pack("<ii", 0, 75)),
        rec("MemGetInfo"),
        rec("HostCopyStats"),
        rec("HostSegmentRegister", struct.pack("<QQQ", 2, 1 << 21, 0x100000)),
        rec("PeekAtLastError"),
        rec("DeviceReset"),
        rec("GetLastError"),
        rec("Memset", memset(A0, 1, 0, 1)),
    ],
}

if __name__ == "__main__":
    out_dir = os.path.join(HERE, "corpus", "dispatch")
    os.makedirs(out_dir, exist_ok=True)
    for name, records in SEEDS.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(b"".join(records))
