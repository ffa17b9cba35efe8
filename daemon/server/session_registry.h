// The sessions phosd serves (one per app process). The remoting issue adds
// sessions as apps connect; the C/R engine reads and changes their state.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "phos.pb.h"

namespace phos::server {

class SessionRegistry {
 public:
  /// A copy of every session's public description, ordered by session id.
  std::vector<v1::SessionInfo> List() const;
  /// Only the sessions of one pid (pid 0 = all).
  std::vector<v1::SessionInfo> ListForPid(int pid) const;
  std::size_t size() const;

  /// Adds or replaces the description of a session.
  void Upsert(const v1::SessionInfo& info);
  /// Removes a session; false if it was not there.
  bool Remove(std::uint64_t session_id);

 private:
  mutable std::mutex mu_;
  // session id -> description. Guarded by mu_.
  std::map<std::uint64_t, v1::SessionInfo> sessions_;
};

}  // namespace phos::server
