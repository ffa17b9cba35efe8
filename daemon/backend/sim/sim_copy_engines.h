// The copy engines of one sim device: a bounded pool (at most `engines`
// host<->device copies run at once, the rest wait in FIFO order) and the
// modelled link bandwidth per engine.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace phos::backend::sim {

class SimCopyEngines {
 public:
  /// Throttled copies move this many bytes between sleeps.
  static constexpr std::size_t kChunkBytes = 1u << 20;

  /// `link_gbps` in 10^9 bytes/s per engine; 0 = unthrottled.
  SimCopyEngines(int engines, double link_gbps);

  int engines() const { return engines_; }
  double link_gbps() const { return link_gbps_; }

  /// Copies a host<->device range on one engine: waits for a free engine,
  /// then moves the bytes in chunks, sleeping until start + bytes/rate after
  /// each (never busy-waiting).
  void Copy(void* dst, const void* src, std::size_t bytes);

  /// The most engines ever busy at once (for tests and `phos status`).
  int peak_in_use() const;

 private:
  void Acquire();
  void Release();

  const int engines_;
  const double link_gbps_;

  mutable std::mutex mu_;         // protects free_, peak_, next_ticket_, waiting_
  std::condition_variable cv_;    // signalled when an engine frees up or the queue head moves
  int free_;                      // engines not in use
  int peak_ = 0;                  // most engines in use at once
  std::uint64_t next_ticket_ = 0; // FIFO ticket of the next Acquire
  std::deque<std::uint64_t> waiting_;  // tickets of Acquires waiting, in order
};

}  // namespace phos::backend::sim
