#include "server/run_registry.h"

#include <algorithm>

#include "common/plain_name.h"
#include "common/proc_stat.h"

namespace phos::server {
namespace {

/// `pid` runs and started at `start_ticks`.
bool SameProcessRuns(pid_t pid, std::uint64_t start_ticks) {
  ProcStat st;
  return ReadProcStat(pid, &st) && st.start_ticks == start_ticks && st.running();
}

}  // namespace

Status RunRegistry::CheckName(const std::string& name) {
  const bool all_digits =
      !name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!IsPlainName(name) || all_digits) {
    return Status::InvalidArgument("bad name '" + name +
                                   "': use 1-100 characters of A-Z a-z 0-9 _ . -, not starting with '.' and not "
                                   "all digits (a target of digits only is a pid)");
  }
  return Status::Ok();
}

bool RunRegistry::Live(const Run& r) {
  return !r.sessions.empty() || SameProcessRuns(r.info.launcher_pid, r.start_ticks);
}

Status RunRegistry::Register(pid_t launcher_pid, const std::string& name, const std::string& job) {
  if (!name.empty()) PHOS_RETURN_IF_ERROR(CheckName(name));
  if (!job.empty()) PHOS_RETURN_IF_ERROR(CheckName(job).WithContext("the job's name"));
  ProcStat st;
  if (launcher_pid <= 0 || !ReadProcStat(launcher_pid, &st) || !st.running()) {
    return Status::InvalidArgument("launcher pid " + std::to_string(launcher_pid) +
                                   " does not run here (RegisterRun comes from `phos run` on this host)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  runs_.erase(std::remove_if(runs_.begin(), runs_.end(),
                             [&](const Run& r) {
                               // Dead, or an earlier registration of this very launcher.
                               return !Live(r) ||
                                      (r.info.launcher_pid == launcher_pid && r.start_ticks == st.start_ticks &&
                                       r.sessions.empty());
                             }),
              runs_.end());
  if (!name.empty()) {
    for (const Run& r : runs_) {
      if (r.info.name != name) continue;
      std::string who = "`phos run` pid " + std::to_string(r.info.launcher_pid);
      if (!SameProcessRuns(r.info.launcher_pid, r.start_ticks)) who = "a program whose `phos run` has ended";
      return Status::AlreadyExists("the name '" + name + "' is taken on this phosd by " + who +
                                   " (`phos ps` shows it): choose another name, or end that program first");
    }
  }
  Run r;
  r.info = RunInfo{launcher_pid, name, job};
  r.start_ticks = st.start_ticks;
  runs_.push_back(std::move(r));
  return Status::Ok();
}

std::optional<RunInfo> RunRegistry::BindSession(std::uint64_t session_id, pid_t pid) {
  ProcStat st;
  if (!ReadProcStat(pid, &st)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  for (Run& r : runs_) {
    const pid_t l = r.info.launcher_pid;
    if ((l == pid || l == st.parent) && SameProcessRuns(l, r.start_ticks)) {
      r.sessions.insert(session_id);
      return r.info;
    }
  }
  return std::nullopt;
}

void RunRegistry::UnbindSession(std::uint64_t session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Run& r : runs_) r.sessions.erase(session_id);
}

}  // namespace phos::server
