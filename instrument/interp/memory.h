// Memory model of the PTX interpreter.
//
// State spaces and their addresses:
//   .global  device addresses. In the sim backend a device address IS a host
//            address inside a reserved range, so GlobalMemory::Translate
//            checks the range and returns the address itself. Generic
//            addresses of global memory are the same numbers (cvta is the
//            identity).
//   .const / module .global variables
//            storage owned by the Program (host memory); their addresses
//            are host addresses as well, checked before GlobalMemory.
//   .shared  per block; a .shared address is an offset into the block's
//            shared memory (static variables, then dynamic shared memory).
//   .local   per thread; a .local address is an offset into the thread's
//            local stack (each call frame gets its function's depot).
//   .param   per call frame; a .param address is an offset into the frame's
//            parameter buffer (kernel parameters / call arguments).
// Generic addresses of shared, local and param memory live in windows at
// the top of the 64-bit space, which no user-space host (= device) address
// can reach (x86-64 / AArch64 user addresses are below 2^48):
//   kSharedWindow + offset, kLocalWindow + offset, kParamWindow + offset.
// Function pointers are addresses in kCodeWindow (Program::FunctionAddress):
// only an indirect call accepts them; a load or store there faults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <shared_mutex>

namespace phos::interp {

constexpr uint64_t kWindowSize = uint64_t{1} << 32;
constexpr uint64_t kCodeWindow = 0xFB00'0000'0000'0000ull;
constexpr uint64_t kParamWindow = 0xFC00'0000'0000'0000ull;
constexpr uint64_t kLocalWindow = 0xFD00'0000'0000'0000ull;
constexpr uint64_t kSharedWindow = 0xFE00'0000'0000'0000ull;

inline bool InWindow(uint64_t addr, uint64_t window) { return addr - window < kWindowSize; }

// Device (global) memory as seen by kernels. Translate is called from every
// worker thread of a launch at once: implementations must be thread-safe.
class GlobalMemory {
 public:
  virtual ~GlobalMemory() = default;
  // Host pointer for device bytes [addr, addr + bytes), or nullptr if any of
  // them is not device memory (the launch then fails like an illegal-address
  // fault). `write` says whether the access stores.
  virtual void* Translate(uint64_t addr, size_t bytes, bool write) = 0;
};

// Default GlobalMemory: device address == host address, allowed inside a set
// of registered ranges. Lock: mu_ (shared for Translate, exclusive for
// Add/Remove), so ranges may change while launches run.
class RangeGlobalMemory : public GlobalMemory {
 public:
  void AddRange(uint64_t base, size_t bytes);
  void AddRange(const void* base, size_t bytes) { AddRange(reinterpret_cast<uint64_t>(base), bytes); }
  void RemoveRange(uint64_t base);
  void* Translate(uint64_t addr, size_t bytes, bool write) override;

 private:
  mutable std::shared_mutex mu_;
  std::map<uint64_t, size_t> ranges_;  // base -> size; guarded by mu_
};

}  // namespace phos::interp
