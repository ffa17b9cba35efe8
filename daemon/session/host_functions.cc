#include "session/host_functions.h"

#include "protocol/wire.h"
#include "ring/waiter.h"

namespace phos::session {

namespace {
// How long a gate sleeps before it looks at cancelled() again: the bound on
// a teardown's wait for a gate whose app will not answer.
constexpr std::int64_t kCheckPeriodNs = 50'000'000;
// A function that returns at once is answered within microseconds: poll
// that long before sleeping.
constexpr std::int64_t kSpinNs = 20'000;
}  // namespace

void HostFunctionGates::Pass(std::atomic<std::uint32_t>* word, std::atomic<std::uint32_t>* doorbell) const {
  if (cancelled()) return;
  word->store(wire::kHostFuncReached, std::memory_order_seq_cst);
  doorbell->fetch_add(1, std::memory_order_seq_cst);
  ring::FutexWake(doorbell, 1);  // the app's one host-function thread
  const std::int64_t spin_until = ring::MonotonicNs() + kSpinNs;
  while (word->load(std::memory_order_acquire) == wire::kHostFuncReached) {
    if (ring::MonotonicNs() < spin_until) {
      ring::CpuRelax();
      continue;
    }
    if (cancelled()) return;
    (void)ring::FutexWait(word, wire::kHostFuncReached, kCheckPeriodNs);
  }
}

}  // namespace phos::session
