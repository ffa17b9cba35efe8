// The copy-on-write reserve (docs/protocols.md "Soft copy-on-write",
// "The reserve"): per GPU, `--cow-reserve` bytes of device memory
// allocated ONCE when phosd starts (in the constructor, so the free memory
// apps see does not change under them later) and written once in the
// background, because on the sim device memory is host memory whose pages
// the kernel only provides (and zeroes) on first touch. A cow checkpoint carves its
// shadows out of it, so a shadow is one D2D into ready memory: no
// allocation (which on a GPU may synchronise the device, and on the sim
// costs a page fault per 4 KiB page) ever happens while the app waits.
//
// The memory belongs to a context of the pool's own (one per GPU), never
// handed to a session: a session's streams copy into it (a D2D between two
// contexts' memory of one device; the sim's copies check no owner, the
// cuda backend's cuMemcpyAsync infers it from unified addresses — not yet
// run on a GPU), no kernel ever touches it.
//
// Until a device's reserve is filled (or when its allocation failed: the
// fill thread retries with backoff, like the context pool), Take answers
// Unavailable and the checkpoint allocates its shadows itself, as before
// the pool existed (cow_checkpoint.cc says so in the log, once).
//
// Threads: Take, GiveBack, stats and WaitUntilReady from any thread. One
// fill thread allocates and writes each device's block, never holding the
// lock while it does. mutex_ guards every member below it; it is a leaf
// lock (the pool calls nobody while holding it): callers may hold theirs
// (cow holds its table's mutex around Take/GiveBack).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "common/retry_backoff.h"
#include "common/status.h"

namespace phos::engine {

struct ShadowPoolOptions {
  /// Device bytes to reserve per GPU (rounded up to 2 MiB); 0 = no pool
  /// (no thread; every Take is Unavailable).
  std::uint64_t bytes_per_device = 0;
  /// The block is written in pieces of this size (Shutdown is honoured
  /// between pieces).
  std::uint64_t fill_piece_bytes = 64ull << 20;
  /// After a failed fill the thread waits `retry_initial`, then twice as
  /// long after each further failure, up to `retry_max`.
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{10000};
};

struct ShadowPoolDeviceStats {
  bool ready = false;
  std::uint64_t bytes = 0;          // the block (0 until ready)
  std::uint64_t in_use = 0;         // bytes taken now
  std::uint64_t largest_free = 0;   // the largest range Take could return now
  std::uint64_t fill_failures = 0;
  std::uint64_t fill_us = 0;        // allocation + first write, when ready
  std::string last_error;           // of the last failed fill ("" if none)
};

class ShadowPool {
 public:
  /// Ranges are aligned to (and sized in multiples of) this.
  static constexpr std::uint64_t kAlignment = 4096;

  /// `backend` must outlive the pool. Allocates every device's block here
  /// (a device that cannot is retried by the fill thread, with backoff) and
  /// starts the fill thread (when bytes_per_device > 0), which writes them.
  ShadowPool(backend::Backend* backend, ShadowPoolOptions options);
  ~ShadowPool();  // Shutdown()
  ShadowPool(const ShadowPool&) = delete;
  ShadowPool& operator=(const ShadowPool&) = delete;

  /// `bytes` of the reserve of `device` at `*out` (first fit). Unavailable
  /// when that device's reserve is not filled (yet, or its fill failed:
  /// the message says which); OutOfMemory when no free range is large
  /// enough now (others hold it: the caller waits, as with a full reserve).
  Status Take(int device, std::uint64_t bytes, backend::DevicePtr* out);
  /// Gives back a range Take returned. The caller makes sure no copy into
  /// it is still queued. Unknown pointers are logged and ignored.
  void GiveBack(int device, backend::DevicePtr ptr);

  /// Stops the fill thread (a fill in progress stops at its next piece)
  /// and frees every block. Ranges still taken become invalid: call it
  /// after every session (and so every checkpoint) has ended. Idempotent.
  void Shutdown();

  /// Blocks until every device's reserve is ready, or `timeout` passes;
  /// true if all are ready. For tests and benchmarks.
  bool WaitUntilReady(std::chrono::milliseconds timeout) const;

  std::uint64_t bytes_per_device() const { return bytes_per_device_; }
  std::vector<ShadowPoolDeviceStats> stats() const;
  /// stats() as `phos status` counters: cow_reserve.{bytes_per_device,
  /// ready_devices,in_use,fill_failures,fill_us_max}.
  void ExportCounters(std::map<std::string, std::uint64_t>* out) const;

 private:
  struct Device {
    std::unique_ptr<backend::Context> ctx;  // owns the block; set once allocated
    backend::DevicePtr base = 0;
    bool ready = false;                     // allocated and written: Take may use it
    std::map<std::uint64_t, std::uint64_t> free;         // offset -> bytes, disjoint, coalesced
    std::unordered_map<backend::DevicePtr, std::uint64_t> taken;  // start -> bytes
    std::uint64_t in_use = 0;
    std::uint64_t fill_us = 0;
    std::string last_error;
    // No fill attempt before its retry_at(). Its failures() are also the
    // device's fill failures: never reset here, since a reserve once filled
    // is not filled again.
    RetryBackoff backoff;
  };

  void FillLoop();
  /// Allocates one device's block in a context of its own (no lock held).
  Status Allocate(int device, std::unique_ptr<backend::Context>* ctx, backend::DevicePtr* base);
  /// Writes a block once, piece by piece (no lock held; stops when stopping_).
  Status Write(backend::Context* ctx, backend::DevicePtr base);
  bool AllReadyLocked() const;

  backend::Backend* const backend_;  // not owned; immutable
  const ShadowPoolOptions options_;  // immutable
  const std::uint64_t bytes_per_device_;  // immutable: options_' rounded up

  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;  // a device became ready; stop
  std::vector<Device> devices_;         // by ordinal; sized once in the constructor
  bool stopping_ = false;

  std::thread thread_;  // touched by the constructor and Shutdown only
};

}  // namespace phos::engine
