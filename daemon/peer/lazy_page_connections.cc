#include "peer/lazy_page_connections.h"

#include <poll.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

namespace phos::peer {

LazyPageConnections::~LazyPageConnections() {
  for (auto& [name, p] : parked_) close(p.fd);
}

Status LazyPageConnections::Park(const std::string& name, int fd) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    // A source that gave up (a migration that failed before its restore)
    // closed its end: that connection can serve no restore.
    pollfd p{it->second.fd, POLLRDHUP, 0};
    const bool closed = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
    if (!closed && now - it->second.at < kTtl) {
      ++it;
      continue;
    }
    if (closed) {
      spdlog::info("peer: dropped the lazy-pages connection for '{}': its source closed it", it->first);
    } else {
      spdlog::warn("peer: closed the lazy-pages connection for '{}': no restore claimed it in {} min", it->first,
                   kTtl.count());
    }
    close(it->second.fd);
    it = parked_.erase(it);
  }
  if (parked_.count(name) != 0) {
    close(fd);
    return Status::AlreadyExists("a lazy-pages connection for '" + name + "' is already waiting");
  }
  if (parked_.size() >= kMaxParked) {
    close(fd);
    return Status::Unavailable("too many lazy-pages connections waiting (" + std::to_string(kMaxParked) + ")");
  }
  parked_.emplace(name, Parked{fd, now});
  return Status::Ok();
}

int LazyPageConnections::Take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = parked_.find(name);
  if (it == parked_.end()) return -1;
  const int fd = it->second.fd;
  parked_.erase(it);
  return fd;
}

}  // namespace phos::peer
