#include "backend/sim/sim_event.h"

namespace phos::backend::sim {

std::uint64_t SimEvent::BeginRecord() {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  pending_.insert(generation_);
  return generation_;
}

void SimEvent::Complete(std::uint64_t gen) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(gen);
    if (gen > stamped_generation_) {
      stamped_generation_ = gen;
      stamp_ = Clock::now();
    }
  }
  cv_.notify_all();
}

std::uint64_t SimEvent::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

bool SimEvent::IsComplete(std::uint64_t gen) const {
  std::lock_guard<std::mutex> lock(mu_);
  return IsCompleteLocked(gen);
}

void SimEvent::WaitFor(std::uint64_t gen) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return IsCompleteLocked(gen); });
}

Status SimEvent::Timestamp(Clock::time_point* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation_ == 0) return Status::InvalidArgument("event was never recorded");
  if (!IsCompleteLocked(generation_)) return Status::NotReady("event is still pending");
  // Completing the latest generation always stamps it (it is the highest).
  *out = stamp_;
  return Status::Ok();
}

}  // namespace phos::backend::sim
