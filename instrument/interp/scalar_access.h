// Scalar loads and stores of the PTX interpreter (ops_mem.cc, warp_ops.cc).
// Global memory is shared with the blocks on other host threads; a kernel
// may legally race on it (flags, CAS loops reading the word first). Aligned
// scalar accesses there are therefore host atomics: relaxed for weak
// ld/st (a plain mov on x86-64/AArch64), acquire/release for ordered ones.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

namespace phos::interp {

template <typename U>
inline uint64_t AtomicLoad(const uint8_t* q, std::memory_order mo) {
  return std::atomic_ref<U>(*reinterpret_cast<U*>(const_cast<uint8_t*>(q))).load(mo);
}
template <typename U>
inline void AtomicStore(uint8_t* q, uint64_t v, std::memory_order mo) {
  std::atomic_ref<U>(*reinterpret_cast<U*>(q)).store(static_cast<U>(v), mo);
}

inline uint64_t LoadScalar(const uint8_t* q, int eb, bool atomic, std::memory_order mo) {
  if (atomic && reinterpret_cast<uintptr_t>(q) % eb == 0) {
    switch (eb) {
      case 1: return AtomicLoad<uint8_t>(q, mo);
      case 2: return AtomicLoad<uint16_t>(q, mo);
      case 4: return AtomicLoad<uint32_t>(q, mo);
      default: return AtomicLoad<uint64_t>(q, mo);
    }
  }
  uint64_t v = 0;
  std::memcpy(&v, q, static_cast<size_t>(eb));
  return v;
}

inline void StoreScalar(uint8_t* q, int eb, uint64_t v, bool atomic, std::memory_order mo) {
  if (atomic && reinterpret_cast<uintptr_t>(q) % eb == 0) {
    switch (eb) {
      case 1: return AtomicStore<uint8_t>(q, v, mo);
      case 2: return AtomicStore<uint16_t>(q, v, mo);
      case 4: return AtomicStore<uint32_t>(q, v, mo);
      default: return AtomicStore<uint64_t>(q, v, mo);
    }
  }
  std::memcpy(q, &v, static_cast<size_t>(eb));
}

}  // namespace phos::interp
