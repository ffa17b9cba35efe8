// Device-side malloc and free (docs/instrument.md §6 "The device heap"):
// calls of the external functions `malloc` and `free` that nvcc emits for
// malloc/free/new/delete in kernels, and of the aligned allocation CUDA 13
// lowers `__nv_aligned_device_malloc(size, align)` and over-aligned `new` to
// (`__cuda_syscall_aligned_malloc`; earlier toolkits call
// `__nv_aligned_device_malloc` itself).
//
// The heap is device memory the embedder gives the launch
// (LaunchOptions::heap_base/heap_bytes: in phos, a buffer of the session, so
// a checkpoint carries it). ALL of the allocator's state lives inside the
// heap itself — a header and one 16-byte header per block — so a restored
// heap is a working heap, and allocations made by one kernel are freed by
// another, as CUDA allows.
//
//   heap_base + 0   magic "PHOSHEAP" (a heap without it is formatted: all free)
//             + 8   bytes of the heap
//             + 16  the next-fit rover (offset of the block to search from)
//   heap_base + 64  blocks: [u64 size | used bit][u64 reserved][payload ...]
// Blocks are 16-byte multiples, payloads 16-byte aligned (CUDA's promise).
// Adjacent free blocks merge while malloc walks over them.
//
// Lock: one process-wide mutex around every malloc and free (the blocks of
// a launch run on several host threads; device malloc is rare enough that
// one lock costs nothing measurable).
#include <cstring>
#include <mutex>

#include "common/hex.h"
#include "interp/exec.h"

namespace phos::interp {

namespace {

constexpr uint64_t kMagic = 0x50414548534f4850ull;  // the bytes "PHOSHEAP"
constexpr uint64_t kFirstBlock = 64;
constexpr uint64_t kHeader = 16;
constexpr uint64_t kUsed = 1;

std::mutex g_heap_mu;

// The heap's memory, or nullptr (x.error set).
uint8_t* HeapMemory(Exec& x) {
  const LaunchOptions& o = *x.b->opts;
  if (o.heap_base == 0 || o.heap_bytes < kFirstBlock + 2 * kHeader) {
    x.error = "device-side malloc/free without a device heap (the embedder gave the launch none)";
    return nullptr;
  }
  return Resolve(x, ptx::Space::kGlobal, o.heap_base, o.heap_bytes, true);
}

uint64_t Load(const uint8_t* h, uint64_t off) {
  uint64_t v = 0;
  std::memcpy(&v, h + off, 8);
  return v;
}
void Store(uint8_t* h, uint64_t off, uint64_t v) { std::memcpy(h + off, &v, 8); }

// Formats a heap that is not one yet (fresh memory is zero).
void Format(uint8_t* h, uint64_t bytes) {
  const uint64_t usable = (bytes - kFirstBlock) & ~uint64_t{15};
  Store(h, 0, kMagic);
  Store(h, 8, bytes);
  Store(h, 16, kFirstBlock);
  Store(h, kFirstBlock, usable);  // one free block
  Store(h, kFirstBlock + 8, 0);
}

// Caller holds g_heap_mu. Offset of the payload, or 0 when nothing fits.
// `align` (a power of two, at least 16): the payload's address, `base` +
// offset, is a multiple of it; the gap before it in a free block becomes a
// free block of its own, so it needs at least two headers.
uint64_t Allocate(uint8_t* h, uint64_t base, uint64_t bytes, uint64_t want, uint64_t align) {
  const uint64_t need = kHeader + ((want + 15) & ~uint64_t{15});
  if (need < want || align > bytes) return 0;  // overflow; an alignment no block of the heap can have
  const uint64_t end = kFirstBlock + ((bytes - kFirstBlock) & ~uint64_t{15});
  uint64_t rover = Load(h, 16);
  if (rover < kFirstBlock || rover >= end) rover = kFirstBlock;
  // Two passes: from the rover to the end, then from the start.
  for (int pass = 0; pass < 2; ++pass) {
    uint64_t at = pass == 0 ? rover : kFirstBlock;
    const uint64_t stop = pass == 0 ? end : rover;
    while (at < stop) {
      uint64_t size = Load(h, at);
      if (size < kHeader || (size & ~kUsed) > end - at) return 0;  // a corrupt heap: nothing more to give
      if ((size & kUsed) == 0) {
        // Merge the free blocks that follow.
        while (at + size < end) {
          const uint64_t next = Load(h, at + size);
          if ((next & kUsed) != 0 || next < kHeader || next > end - at - size) break;
          size += next;
        }
        Store(h, at, size);
        uint64_t lead = 0;  // bytes before the block, for alignment
        if (align > 16) {
          uint64_t payload = ((base + at + kHeader + align - 1) & ~(align - 1)) - base;
          if (payload - kHeader - at != 0 && payload - kHeader - at < 2 * kHeader) payload += align;
          lead = payload - kHeader - at;
        }
        if (lead <= size && size - lead >= need) {
          if (lead > 0) {  // the gap stays free
            Store(h, at, lead);
            Store(h, at + 8, 0);
            at += lead;
            size -= lead;
            Store(h, at, size);
          }
          if (size - need >= 2 * kHeader) {  // split
            Store(h, at + need, size - need);
            Store(h, at + need + 8, 0);
            size = need;
          }
          Store(h, at, size | kUsed);
          Store(h, 16, at + size < end ? at + size : kFirstBlock);
          return at + kHeader;
        }
      }
      at += size & ~kUsed;
    }
  }
  return 0;
}

}  // namespace

namespace {

// malloc(want) with the payload aligned to `align`; the call's result.
Flow MallocAligned(Exec& x, const Op& op, uint64_t want, uint64_t align) {
  uint64_t result = 0;
  if (want != 0) {
    uint8_t* h = HeapMemory(x);
    if (h == nullptr) return Flow::kError;
    const uint64_t bytes = x.b->opts->heap_bytes;
    std::lock_guard<std::mutex> lock(g_heap_mu);
    if (Load(h, 0) != kMagic || Load(h, 8) != bytes) Format(h, bytes);
    const uint64_t off = Allocate(h, x.b->opts->heap_base, bytes, want, align);
    result = off == 0 ? 0 : x.b->opts->heap_base + off;  // NULL when the heap is full, as CUDA
  }
  return SetCallReturn(x, op, result, 8);
}

}  // namespace

Flow ExecDeviceMalloc(Exec& x, const Op& op) {
  return MallocAligned(x, op, op.shape[1] > 0 ? CallArg(x, op, 0) : 0, 16);
}

// (size, align): NULL when align is not a power of two, as CUDA documents
// for __nv_aligned_device_malloc; alignments below 16 get malloc's 16.
Flow ExecDeviceAlignedMalloc(Exec& x, const Op& op) {
  const uint64_t want = op.shape[1] > 0 ? CallArg(x, op, 0) : 0;
  const uint64_t align = op.shape[1] > 1 ? CallArg(x, op, 1) : 0;
  if (align == 0 || (align & (align - 1)) != 0) return SetCallReturn(x, op, 0, 8);
  return MallocAligned(x, op, want, align < 16 ? 16 : align);
}

Flow ExecDeviceFree(Exec& x, const Op& op) {
  const uint64_t p = op.shape[1] > 0 ? CallArg(x, op, 0) : 0;
  if (p == 0) return Flow::kNext;  // free(NULL)
  uint8_t* h = HeapMemory(x);
  if (h == nullptr) return Flow::kError;
  const uint64_t base = x.b->opts->heap_base, bytes = x.b->opts->heap_bytes;
  std::lock_guard<std::mutex> lock(g_heap_mu);
  const uint64_t off = p - base;
  if (p < base || off < kFirstBlock + kHeader || off >= bytes || (off & 15) != 0 || Load(h, 0) != kMagic ||
      (Load(h, off - kHeader) & kUsed) == 0) {
    return Fail(x, "device-side free of " + Hex(p) +
                       ", which is not a live block of the device heap (a double free, or a pointer malloc did "
                       "not return)");
  }
  Store(h, off - kHeader, Load(h, off - kHeader) & ~kUsed);
  return Flow::kNext;
}

}  // namespace phos::interp
