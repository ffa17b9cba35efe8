// Clocks of the control plane (daemon/server): durations for results and
// logs on the monotonic clock (never jumps), and wall-clock stamps for what
// users read or what is compared across processes and hosts (the app's own
// CLOCK_REALTIME log lines, a migration's stop time).
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace phos {

using Clock = std::chrono::steady_clock;

/// Whole milliseconds from `t0` to now (monotonic).
inline std::uint64_t MsSince(Clock::time_point t0) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

/// The monotonic clock now, in nanoseconds since its (arbitrary) epoch: a
/// time point that fits an atomic (Session::BusyCall's start).
inline std::int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// CLOCK_REALTIME now, in nanoseconds since the Unix epoch.
inline std::int64_t RealtimeNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace phos
