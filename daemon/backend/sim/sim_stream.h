// One sim stream: an in-order queue of work run by its own worker thread.
//
// Ops run one at a time in enqueue order; an op that fails makes its error
// sticky on the stream (later ops still run, so event records complete and
// nobody waiting on this stream hangs). The worker blocks on a condition
// variable when idle (no busy-waiting) and is started by the first Enqueue,
// so an idle context costs no thread. Every op gets a sequence number (1, 2,
// ...); other streams and host threads wait for "completed >= seq" through a
// Progress handle, which stays valid after the stream is destroyed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace phos::backend::sim {

class SimStream {
 public:
  using Op = std::function<Status()>;

  /// Progress of a stream, shared with waiters. Thread-safe.
  class Progress {
   public:
    Progress() = default;
    /// True once the op with sequence number `seq` (and all before) ran.
    bool Done(std::uint64_t seq) const;
    /// Blocks until Done(seq).
    void WaitFor(std::uint64_t seq) const;
    /// The sticky error (OK if none).
    Status error() const;

   private:
    friend class SimStream;
    struct State;
    explicit Progress(std::shared_ptr<State> s) : state_(std::move(s)) {}
    std::shared_ptr<State> state_;
  };

  /// `max_queued`: Enqueue waits while this many ops wait to start (0 = no
  /// bound; SimOptions::stream_depth). `abandoned` (may be null): the
  /// owner's flag (SimContext::Abandon); once it is set, ops are skipped
  /// instead of run — each still counts as completed, with its `after`, so
  /// nobody waiting on the stream hangs, and the stream's sticky error
  /// becomes Unavailable — and Enqueue no longer waits for room. The op
  /// running when it is set finishes on its own (a kernel stops early: it
  /// reads the same flag between blocks).
  explicit SimStream(std::size_t max_queued = 0, std::shared_ptr<const std::atomic<bool>> abandoned = nullptr);
  /// Lets queued work finish, then joins the worker.
  ~SimStream();
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  /// Appends an op; returns its sequence number. With a bound, first waits
  /// (blocking) until fewer than max_queued ops wait to start — at most as
  /// long as the running op takes, since every queued op only waits for
  /// work enqueued before it. An abandoned stream never waits. `after`, if
  /// set, runs on
  /// the worker in the same critical section that counts the op completed
  /// (an event record uses it: whoever sees the event complete also sees the
  /// stream caught up, and the reverse). It must be quick and must not call
  /// back into this stream.
  std::uint64_t Enqueue(Op op, std::function<void()> after = nullptr);
  /// Sequence number of the last op enqueued (0 if none).
  std::uint64_t enqueued() const;
  /// True if every op enqueued so far has run.
  bool Idle() const;
  Progress progress() const { return Progress(state_); }

 private:
  static void Run(std::shared_ptr<Progress::State> state);

  std::shared_ptr<Progress::State> state_;  // queue, counters, error: see State
  const std::size_t max_queued_;            // immutable
  std::thread worker_;  // started by the first Enqueue (under State::mu); joined by ~SimStream
};

}  // namespace phos::backend::sim
