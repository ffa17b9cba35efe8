// libFuzzer target for the destination's pre-copy store
// (daemon/server/precopy_store.h): a source on the network chooses every
// field of every PrecopyData and PrecopyRef, so no sequence of them may
// crash phosd, read outside a copy, or grow the store past its limit.
//
// The input is a script of operations, each starting with one op byte:
//   0: Add — then copy id (1 byte), address (1 byte), copy size (2 bytes
//      LE), offset (2 bytes LE), data length (1 byte) and that many bytes
//   1: Seal
//   2: Read — copy id (1 byte), copy offset (2 bytes LE), length (2 bytes
//      LE); on success every returned byte is touched (ASan checks bounds)
// Invariant checked: bytes() never exceeds the 4 KiB limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/precopy_store.h"

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  bool Take(size_t k, uint64_t* v) {
    if (n < k) return false;
    *v = 0;
    for (size_t i = 0; i < k; ++i) *v |= static_cast<uint64_t>(p[i]) << (8 * i);
    p += k;
    n -= k;
    return true;
  }
};

constexpr uint64_t kLimit = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  phos::server::PrecopyStore store("fuzz", kLimit);
  Input in{data, size};
  uint64_t op = 0;
  while (in.Take(1, &op)) {
    switch (op % 3) {
      case 0: {
        uint64_t id, addr, bytes, offset, len;
        if (!in.Take(1, &id) || !in.Take(1, &addr) || !in.Take(2, &bytes) || !in.Take(2, &offset) ||
            !in.Take(1, &len) || in.n < len) {
          return 0;
        }
        phos::peer::v1::PrecopyData d;
        d.set_copy_id(id);
        d.set_address(addr);
        d.set_bytes(bytes);
        d.set_offset(offset);
        d.set_data(reinterpret_cast<const char*>(in.p), len);
        in.p += len;
        in.n -= len;
        (void)store.Add(d);
        break;
      }
      case 1: (void)store.Seal(); break;
      case 2: {
        uint64_t id, off, len;
        if (!in.Take(1, &id) || !in.Take(2, &off) || !in.Take(2, &len)) return 0;
        phos::peer::v1::PrecopyRef ref;
        ref.set_copy_id(id);
        ref.set_copy_offset(off);
        ref.set_length(len);
        const char* bytes = nullptr;
        if (store.Read(ref, &bytes).ok()) {
          volatile char sum = 0;
          for (uint64_t i = 0; i < len; ++i) sum = static_cast<char>(sum + bytes[i]);
          (void)sum;
        }
        break;
      }
    }
    if (store.bytes() > kLimit) abort();
  }
  return 0;
}
