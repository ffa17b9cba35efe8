// Exclusive ownership of the control socket path.
//
// Two daemons on one socket would split sessions between them, so phosd
// takes an advisory lock (flock) on "<socket>.lock" for its whole life and
// records its pid there. Holding the lock proves no live daemon owns the
// socket, so a socket file left behind by a crashed daemon is stale and is
// removed. The lock dies with the process, so a crash never leaves the path
// unusable.
#pragma once

#include <string>

#include "common/status.h"

namespace phos::server {

class SocketGuard {
 public:
  SocketGuard() = default;
  ~SocketGuard();
  SocketGuard(const SocketGuard&) = delete;
  SocketGuard& operator=(const SocketGuard&) = delete;

  /// Creates the socket's directory if needed, takes the lock, removes a
  /// stale socket file. FailedPrecondition naming the owner's pid when
  /// another live daemon holds the path. `*removed_stale` tells whether a
  /// stale socket was cleaned up.
  Status Acquire(const std::string& socket_path, bool* removed_stale);

  /// Removes the socket file and releases the lock (also done by the
  /// destructor).
  void Release();

 private:
  std::string socket_path_;
  std::string lock_path_;
  int lock_fd_ = -1;
};

}  // namespace phos::server
