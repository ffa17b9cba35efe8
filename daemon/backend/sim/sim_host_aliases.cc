#include "backend/sim/sim_host_aliases.h"

#include <mutex>
#include <string>

namespace phos::backend::sim {

Status SimHostAliases::Add(std::uint64_t device_address, void* host, std::size_t bytes) {
  if (host == nullptr || bytes == 0 || device_address == 0 || device_address > UINT64_MAX - bytes)
    return Status::InvalidArgument("host alias: null host memory, 0 bytes, or a range that wraps");
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto next = aliases_.lower_bound(device_address);
  bool overlap = next != aliases_.end() && next->first < device_address + bytes;
  if (!overlap && next != aliases_.begin()) {
    auto prev = std::prev(next);
    overlap = device_address - prev->first < prev->second.bytes;
  }
  if (overlap) return Status::AlreadyExists("host alias overlaps another mapped host range");
  aliases_.emplace(device_address, Alias{bytes, static_cast<char*>(host)});
  return Status::Ok();
}

Status SimHostAliases::Remove(std::uint64_t device_address) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (aliases_.erase(device_address) == 0)
    return Status::InvalidArgument("no mapped host range starts at device address " + std::to_string(device_address));
  return Status::Ok();
}

void* SimHostAliases::Translate(std::uint64_t addr, std::size_t bytes) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = aliases_.upper_bound(addr);
  if (it == aliases_.begin()) return nullptr;
  --it;
  const std::uint64_t off = addr - it->first;
  if (off >= it->second.bytes || bytes > it->second.bytes - off) return nullptr;
  return it->second.host + off;
}

bool SimHostAliases::empty() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return aliases_.empty();
}

}  // namespace phos::backend::sim
