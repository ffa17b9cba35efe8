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

// Device memory that stays reachable, at one host mapping, for the rest of
// the launch that was told of it: [begin, end) at host address `host`
// (for begin). Empty (end == begin) when there is no such promise.
struct StableRange {
  uint64_t begin = 0, end = 0;
  uint8_t* host = nullptr;
};

// Device (global) memory as seen by kernels. Translate is called from every
// worker thread of a launch at once: implementations must be thread-safe.
class GlobalMemory {
 public:
  virtual ~GlobalMemory() = default;
  // Host pointer for device bytes [addr, addr + bytes), or nullptr if any of
  // them is not device memory (the launch then fails like an illegal-address
  // fault). `write` says whether the access stores.
  virtual void* Translate(uint64_t addr, size_t bytes, bool write) = 0;
  // As Translate; on success also *range: the whole stretch of device
  // memory those bytes lie in when it stays reachable for the rest of this
  // launch (an allocation the launch has pinned), so that the interpreter
  // may translate later accesses inside it itself, without a call and a
  // lock each (the lockstep warps' loads and stores would otherwise
  // contend on this object's lock from every worker). Reads and writes
  // there are then both allowed without asking: memory that refuses one
  // of them must not be handed out as stable. Empty when there is no such
  // stretch; then every access asks again.
  virtual void* TranslateStable(uint64_t addr, size_t bytes, bool write, StableRange* range) {
    *range = {};
    return Translate(addr, bytes, write);
  }
};

// Default GlobalMemory: device address == host address, allowed inside a set
// of registered ranges. Lock: mu_ (shared for Translate, exclusive for
// Add/Remove). Ranges may be added while launches run; a range may be
// removed only when no running launch uses it (TranslateStable hands the
// ranges out as stable for the launch).
class RangeGlobalMemory : public GlobalMemory {
 public:
  void AddRange(uint64_t base, size_t bytes);
  void AddRange(const void* base, size_t bytes) { AddRange(reinterpret_cast<uint64_t>(base), bytes); }
  void RemoveRange(uint64_t base);
  void* Translate(uint64_t addr, size_t bytes, bool write) override;
  void* TranslateStable(uint64_t addr, size_t bytes, bool write, StableRange* range) override;

 private:
  mutable std::shared_mutex mu_;
  std::map<uint64_t, size_t> ranges_;  // base -> size; guarded by mu_
};

}  // namespace phos::interp
