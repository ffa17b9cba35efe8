#include "engine/progress.h"

namespace phos::engine {

Progress::Progress() : started_(Clock::now()), phase_started_(started_) {}

void Progress::SetPhase(std::string phase, std::string message, std::uint64_t bytes_total) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    s_.phase = std::move(phase);
    s_.message = std::move(message);
    s_.bytes_done = 0;
    s_.bytes_total = bytes_total;
    s_.bytes_per_second = 0;
    phase_started_ = Clock::now();
    ++s_.version;
  }
  cv_.notify_all();
}

void Progress::AddBytes(std::uint64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    s_.bytes_done += n;
    const double secs = std::chrono::duration<double>(Clock::now() - phase_started_).count();
    s_.bytes_per_second = secs > 0 ? static_cast<double>(s_.bytes_done) / secs : 0;
    ++s_.version;
  }
  cv_.notify_all();
}

std::function<void(std::uint64_t, std::uint64_t)> Progress::TotalsReporter(std::string phase, std::string message) {
  auto reported = std::make_shared<std::uint64_t>(0);  // the reporter's own: it runs on one thread at a time
  return [this, reported, phase = std::move(phase), message = std::move(message)](std::uint64_t done,
                                                                                  std::uint64_t total) {
    if (done == 0) {
      SetPhase(phase, message, total);
      *reported = 0;
      return;
    }
    if (done > *reported) AddBytes(done - *reported);
    *reported = done;
  };
}

ProgressSnapshot Progress::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  ProgressSnapshot out = s_;
  out.elapsed_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  return out;
}

void Progress::WaitForChange(std::uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return s_.version != seen; });
}

void Progress::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++s_.version;
  }
  cv_.notify_all();
}

}  // namespace phos::engine
