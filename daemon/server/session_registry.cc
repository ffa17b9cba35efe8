#include "server/session_registry.h"

namespace phos::server {

std::vector<v1::SessionInfo> SessionRegistry::List() const { return ListForPid(0); }

std::vector<v1::SessionInfo> SessionRegistry::ListForPid(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::SessionInfo> out;
  for (const auto& [id, info] : sessions_) {
    if (pid == 0 || info.pid() == pid) out.push_back(info);
  }
  return out;
}

std::size_t SessionRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void SessionRegistry::Upsert(const v1::SessionInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[info.session_id()] = info;
}

bool SessionRegistry::Remove(std::uint64_t session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.erase(session_id) > 0;
}

}  // namespace phos::server
