// RetryBackoff: when a background fill loop tries a failed device again —
// the context pool's refill (backend/context_pool.h) and the cow reserve's
// fill (engine/shadow_pool.h) share it, so both back off alike: after the
// first failure in a row wait `initial`, then twice as long after each
// further one, up to `max`; a success starts over.
//
// Not thread-safe: its owner's lock guards it (both pools keep one per
// device under their mutex).
#pragma once

#include <algorithm>
#include <chrono>

namespace phos {

class RetryBackoff {
 public:
  using Clock = std::chrono::steady_clock;

  /// A failed attempt at `now`; the next waits until retry_at(). Returns the
  /// failures in a row, this one included (1: the first — worth a warning).
  int Fail(Clock::time_point now, std::chrono::milliseconds initial, std::chrono::milliseconds max) {
    delay_ = failures_ == 0 ? initial : std::min(max, delay_ * 2);
    ++failures_;
    retry_at_ = now + delay_;
    return failures_;
  }
  /// A successful attempt. Returns how many failures in a row it ended.
  int Succeed() {
    const int ended = failures_;
    failures_ = 0;
    delay_ = std::chrono::milliseconds{0};
    return ended;
  }
  /// Failed, and not yet time to try again at `now`.
  bool Waiting(Clock::time_point now) const { return failures_ > 0 && retry_at_ > now; }
  Clock::time_point retry_at() const { return retry_at_; }
  std::chrono::milliseconds delay() const { return delay_; }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
  std::chrono::milliseconds delay_{0};
  Clock::time_point retry_at_{};
};

}  // namespace phos
