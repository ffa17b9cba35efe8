// One sim event (cuEvent semantics with a generation counter).
//
// Each RecordEvent starts a new generation; the record op on the stream
// completes it. StreamWaitEvent/SynchronizeEvent wait for the generation
// current at the call, even if the event is re-recorded meanwhile (records on
// different streams may complete out of order, so completion is tracked per
// generation). A never-recorded event (generation 0) is complete.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>

#include "common/status.h"

namespace phos::backend::sim {

class SimEvent {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SimEvent(unsigned flags) : flags_(flags) {}

  unsigned flags() const { return flags_; }

  /// Starts a new generation (a record being enqueued); returns it.
  std::uint64_t BeginRecord();
  /// Marks generation `gen` complete (run by the record op on a stream worker).
  void Complete(std::uint64_t gen);
  /// The latest generation (0 if never recorded).
  std::uint64_t generation() const;
  bool IsComplete(std::uint64_t gen) const;
  /// Blocks until generation `gen` is complete.
  void WaitFor(std::uint64_t gen) const;
  /// When the latest generation completed. NotReady if it is pending,
  /// InvalidArgument if the event was never recorded.
  Status Timestamp(Clock::time_point* out) const;

 private:
  bool IsCompleteLocked(std::uint64_t gen) const { return pending_.count(gen) == 0; }

  const unsigned flags_;
  mutable std::mutex mu_;                // protects the fields below
  mutable std::condition_variable cv_;   // signalled when a generation completes
  std::uint64_t generation_ = 0;         // latest generation recorded
  std::set<std::uint64_t> pending_;      // generations recorded but not complete
  std::uint64_t stamped_generation_ = 0; // generation `stamp_` belongs to
  Clock::time_point stamp_{};            // completion time of stamped_generation_
};

}  // namespace phos::backend::sim
