#include "server/session_registry.h"

namespace phos::server {

std::vector<v1::SessionInfo> SessionRegistry::List() const { return ListForPid(0); }

std::vector<v1::SessionInfo> SessionRegistry::ListForPid(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::SessionInfo> out;
  for (const auto& [id, entry] : sessions_) {
    if (pid != 0 && entry.info.pid() != pid && entry.info.launcher_pid() != pid) continue;
    out.push_back(entry.info);
    if (entry.live) entry.live(&out.back());
    if (auto st = op_state_.find(id); st != op_state_.end() && out.back().state() == v1::SESSION_RUNNING) {
      out.back().set_state(st->second);
    }
    if (auto c = op_counters_.find(id); c != op_counters_.end()) {
      for (const auto& [name, value] : c->second) (*out.back().mutable_counters())[name] = value;
    }
  }
  return out;
}

void SessionRegistry::SetOperationState(std::uint64_t session_id, v1::SessionState state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state == v1::SESSION_RUNNING) {
    op_state_.erase(session_id);
  } else if (sessions_.count(session_id)) {
    op_state_[session_id] = state;
  }
}

void SessionRegistry::AddOperationCounters(std::uint64_t session_id,
                                           const std::map<std::string, std::uint64_t>& counters) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool live = sessions_.count(session_id) != 0;
  for (const auto& [name, value] : counters) {
    if (live) op_counters_[session_id][name] += value;
    daemon_counters_[name] += value;
  }
}

std::map<std::string, std::uint64_t> SessionRegistry::DaemonCounters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return daemon_counters_;
}

std::size_t SessionRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void SessionRegistry::Upsert(const v1::SessionInfo& info, LiveFields live) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[info.session_id()] = Entry{info, std::move(live)};
}

int SessionRegistry::ResolvePid(int target) const {
  if (target <= 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, entry] : sessions_) {
    if (entry.info.pid() == target) return target;
  }
  int found = 0;
  for (const auto& [id, entry] : sessions_) {
    if (entry.info.launcher_pid() == target) found = entry.info.pid();  // ids grow: the newest wins
  }
  return found;
}

void SessionRegistry::Publish(const session::SessionSummary& s) {
  std::optional<RunInfo> run;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = run_of_.find(s.session_id); it != run_of_.end()) {
      run = it->second;
      known = true;
    }
  }
  if (!known) {
    run = runs_.BindSession(s.session_id, s.pid);  // reads /proc: outside mu_
    std::lock_guard<std::mutex> lock(mu_);
    run_of_[s.session_id] = run;
  }
  v1::SessionInfo info;
  if (run) {
    info.set_launcher_pid(run->launcher_pid);
    info.set_name(run->name);
    info.set_job(run->job);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto j = restored_job_.find(s.pid); j != restored_job_.end()) info.set_job(j->second);
  }
  info.set_session_id(s.session_id);
  info.set_pid(s.pid);
  info.set_command(s.command);
  info.set_device(s.device);
  for (int d : s.other_devices) info.add_other_devices(d);
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
      uint64_t not_listed = 0;
      i->clear_unvalidatable_kernels();
      for (const auto& k : stats->UnvalidatableKernels(&not_listed)) {
        v1::UnvalidatableKernel* out = i->add_unvalidatable_kernels();
        out->set_kernel(k.kernel);
        out->set_reason(k.reason);
      }
      i->set_unvalidatable_kernels_not_listed(not_listed);
    };
  }
  Upsert(info, std::move(live));
}

bool SessionRegistry::Remove(std::uint64_t session_id) {
  runs_.UnbindSession(session_id);
  bool removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op_state_.erase(session_id);
    op_counters_.erase(session_id);
    run_of_.erase(session_id);
    if (auto it = sessions_.find(session_id); it != sessions_.end()) restored_job_.erase(it->second.info.pid());
    removed = sessions_.erase(session_id) > 0;
  }
  removed_cv_.notify_all();
  return removed;
}

bool SessionRegistry::WaitRemoved(std::uint64_t session_id, std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(mu_);
  return removed_cv_.wait_for(lock, limit, [&] { return sessions_.count(session_id) == 0; });
}

void SessionRegistry::SetRestoredJob(pid_t pid, const std::string& job) {
  if (job.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  restored_job_[pid] = job;
  for (auto& [id, entry] : sessions_) {
    if (entry.info.pid() == pid && entry.info.job().empty()) entry.info.set_job(job);
  }
}

std::string SessionRegistry::JobOf(std::uint64_t session_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? std::string() : it->second.info.job();
}

}  // namespace phos::server
