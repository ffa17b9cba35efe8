#include "server/session_registry.h"

namespace phos::server {

std::vector<v1::SessionInfo> SessionRegistry::List() const { return ListForPid(0); }

std::vector<v1::SessionInfo> SessionRegistry::ListForPid(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::SessionInfo> out;
  for (const auto& [id, entry] : sessions_) {
    if (pid != 0 && entry.info.pid() != pid) continue;
    out.push_back(entry.info);
    if (entry.live) entry.live(&out.back());
  }
  return out;
}

std::size_t SessionRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void SessionRegistry::Upsert(const v1::SessionInfo& info, LiveFields live) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[info.session_id()] = Entry{info, std::move(live)};
}

void SessionRegistry::Publish(const session::SessionSummary& s) {
  v1::SessionInfo info;
  info.set_session_id(s.session_id);
  info.set_pid(s.pid);
  info.set_command(s.command);
  info.set_device(s.device);
  info.set_device_memory_bytes(s.device_memory_bytes);
  info.set_buffer_count(s.buffer_count);
  info.set_state(s.state == session::SessionSummary::State::kRunning ? v1::SESSION_RUNNING : v1::SESSION_EXITED);
  info.set_started_unix_ms(s.started_unix_ms);
  LiveFields live;
  if (s.access_stats) {
    live = [stats = s.access_stats](v1::SessionInfo* i) {
      constexpr auto kRelaxed = std::memory_order_relaxed;
      i->set_calls_exact(stats->exact.load(kRelaxed));
      i->set_calls_speculated(stats->speculated.load(kRelaxed));
      i->set_calls_unvalidatable(stats->unvalidatable.load(kRelaxed));
      (*i->mutable_counters())["calls_unknown_access"] = stats->unknown.load(kRelaxed);
    };
  }
  Upsert(info, std::move(live));
}

bool SessionRegistry::Remove(std::uint64_t session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.erase(session_id) > 0;
}

}  // namespace phos::server
