// libFuzzer target for the destination's pre-copy store
// (daemon/image/precopy_store.h): a source on the network chooses every
// field of every PrecopyData, so no sequence of them may crash phosd, place
// a copy outside the file's bounds or over another live copy, or grow the
// file past its limit. The store's file lives under /dev/shm.
//
// The input is a script of operations, each starting with one op byte:
//   0: Add — then copy id (1 byte), address (1 byte), copy size (2 bytes
//      LE), offset (2 bytes LE), chunk size (1 byte), checksum count (1
//      byte; each checksum is that count's index), data length (1 byte) and
//      that many bytes: any malformed chunk
//   3: a well-formed copy — copy id, address (1 byte each), data length (1
//      byte) and that many bytes, with correct 16-byte-chunk checksums, sent
//      as two chunks
//   1: Seal
//   2: Lookup — copy id (1 byte); a found copy must lie past the header
//      block, 4 KiB aligned, inside the limit
// Invariant checked: bytes() never exceeds the 4 KiB limit.
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <unistd.h>

#include "image/precopy_store.h"

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
  // One directory per fuzzer process, removed when it exits (a static's
  // destructor: libFuzzer ends with exit()).
  struct Scratch {
    std::string root = "/dev/shm/phos-precopy-fuzz-" + std::to_string(getpid());
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(root, ignored);
    }
  };
  static const Scratch scratch;
  static const std::string dir = scratch.root + "/s.tmp";
  std::unique_ptr<phos::image::PrecopyStore> owned;
  if (!phos::image::PrecopyStore::Open("fuzz", dir, kLimit, &owned).ok()) abort();
  phos::image::PrecopyStore& store = *owned;
  Input in{data, size};
  uint64_t op = 0;
  while (in.Take(1, &op)) {
    switch (op % 4) {
      case 0: {
        uint64_t id, addr, bytes, offset, cb, sums, len;
        if (!in.Take(1, &id) || !in.Take(1, &addr) || !in.Take(2, &bytes) || !in.Take(2, &offset) ||
            !in.Take(1, &cb) || !in.Take(1, &sums) || !in.Take(1, &len) || in.n < len) {
          return 0;
        }
        phos::peer::v1::PrecopyData d;
        d.set_copy_id(id);
        d.set_address(addr);
        d.set_bytes(bytes);
        d.set_offset(offset);
        d.set_chunk_bytes(cb);
        for (uint64_t k = 0; k < sums; ++k) d.add_chunk_xxh3(k);
        d.set_data(reinterpret_cast<const char*>(in.p), len);
        in.p += len;
        in.n -= len;
        (void)store.Add(d);
        break;
      }
      case 3: {
        uint64_t id, addr, len;
        if (!in.Take(1, &id) || !in.Take(1, &addr) || !in.Take(1, &len) || len == 0 || in.n < len) return 0;
        const std::string copy(reinterpret_cast<const char*>(in.p), len);
        in.p += len;
        in.n -= len;
        phos::peer::v1::PrecopyData d;
        d.set_copy_id(id);
        d.set_address(addr);
        d.set_bytes(len);
        d.set_chunk_bytes(16);
        for (uint64_t off = 0; off < len; off += 16) {
          d.add_chunk_xxh3(XXH3_64bits(copy.data() + off, std::min<uint64_t>(16, len - off)));
        }
        const uint64_t half = len / 2;
        d.set_data(copy.substr(0, half));
        (void)store.Add(d);
        d.clear_chunk_xxh3();
        d.set_offset(half);
        d.set_data(copy.substr(half));
        (void)store.Add(d);
        break;
      }
      case 1: (void)store.Seal(); break;
      case 2: {
        uint64_t id;
        if (!in.Take(1, &id)) return 0;
        phos::image::PrecopyStore::Placement p;
        if (store.Lookup(id, &p).ok()) {
          if (p.file_offset < 4096 || p.file_offset % 4096 != 0 || p.bytes == 0 ||
              p.file_offset - 4096 + p.bytes > kLimit) {
            abort();
          }
        }
        break;
      }
    }
    if (store.bytes() > kLimit) abort();
  }
  return 0;
}
