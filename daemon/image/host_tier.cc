#include "image/host_tier.h"

#include <algorithm>
#include <cstring>

#include "common/hex.h"
#include "image/image_layout.h"

namespace phos::image {

std::uint64_t HostImage::bytes() const {
  std::uint64_t n = manifest.ByteSizeLong();
  for (const auto& b : buffers) n += b.size();
  return n;
}

Status HostImage::ReadBuffer(std::size_t i, void* dst) const {
  if (i >= buffers.size() || static_cast<int>(i) >= manifest.buffers_size()) {
    return Status::InvalidArgument("host image has no buffer " + std::to_string(i));
  }
  const v1::BufferExtent& e = manifest.buffers(static_cast<int>(i));
  const std::vector<std::uint8_t>& data = buffers[i];
  if (data.size() != e.bytes()) {
    return Status::Corruption("host image buffer " + std::to_string(i) + " (" +
                              Hex(e.device_address()) + ") holds " + std::to_string(data.size()) +
                              " bytes, manifest says " + std::to_string(e.bytes()));
  }
  for (int c = 0; c < e.chunk_xxh3_size(); ++c) {
    const std::uint64_t off = static_cast<std::uint64_t>(c) * e.chunk_bytes();
    const std::uint64_t len = std::min<std::uint64_t>(e.chunk_bytes(), e.bytes() - off);
    if (Xxh3(data.data() + off, len) != e.chunk_xxh3(c)) {
      return Status::Corruption("checksum mismatch in host image: buffer " + std::to_string(i) +
                                " (" + Hex(e.device_address()) + "), chunk " + std::to_string(c) +
                                " at buffer offset " + std::to_string(off));
    }
    std::memcpy(static_cast<std::uint8_t*>(dst) + off, data.data() + off, len);
  }
  return Status::Ok();
}

Status HostTier::Put(const std::string& name, std::shared_ptr<const HostImage> image,
                     std::vector<std::string>* evicted) {
  const std::uint64_t need = image->bytes();
  if (need > budget_) {
    return Status::OutOfMemory("host tier: image " + name + " needs " + std::to_string(need) +
                               " bytes, the tier's budget is " + std::to_string(budget_) +
                               "; raise the host tier budget or keep this image on disk only");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = slots_.find(name); it != slots_.end()) {
    used_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  while (used_ + need > budget_ && !lru_.empty()) {
    const std::string victim = lru_.back();
    auto it = slots_.find(victim);
    used_ -= it->second.bytes;
    slots_.erase(it);
    lru_.pop_back();
    if (evicted) evicted->push_back(victim);
  }
  lru_.push_front(name);
  slots_.emplace(name, Slot{std::move(image), need, lru_.begin()});
  used_ += need;
  return Status::Ok();
}

std::shared_ptr<const HostImage> HostTier::Get(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(name);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.image;
}

bool HostTier::Erase(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(name);
  if (it == slots_.end()) return false;
  used_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  slots_.erase(it);
  return true;
}

std::uint64_t HostTier::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

std::vector<std::string> HostTier::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {lru_.begin(), lru_.end()};
}

}  // namespace phos::image
