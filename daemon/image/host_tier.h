// HostTier: checkpoint images kept in phosd's memory (docs/image-format.md tiers: fault
// tolerance — a restore after an app crash needs no disk — and serverless
// templates). An image here is the same manifest plus its buffers' bytes.
//
// Budgeted: Put evicts least-recently-used images until the new one fits.
// Images are handed out as shared_ptr<const HostImage>, so an image being
// restored stays valid even if it is evicted meanwhile.
//
// Thread-safe: mu_ guards the index and LRU list; the images themselves
// are immutable once put.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "image.pb.h"

namespace phos::image {

struct HostImage {
  v1::Manifest manifest;
  /// buffers[i] holds manifest.buffers(i).bytes() bytes.
  std::vector<std::vector<std::uint8_t>> buffers;

  /// Bytes charged against the tier's budget (buffer data + manifest).
  std::uint64_t bytes() const;
  /// Copies buffer i into dst, verifying every chunk's xxh3 (a host image
  /// can rot too: a stray write in phosd). Corruption names buffer/chunk.
  Status ReadBuffer(std::size_t i, void* dst) const;
};

class HostTier {
 public:
  explicit HostTier(std::uint64_t budget_bytes) : budget_(budget_bytes) {}

  /// Stores (or replaces) `name`, evicting LRU images to fit. OutOfMemory if
  /// the image alone exceeds the budget (nothing is evicted then).
  /// `evicted` (optional) receives the names evicted.
  Status Put(const std::string& name, std::shared_ptr<const HostImage> image,
             std::vector<std::string>* evicted = nullptr);
  /// The image (and marks it most recently used), or nullptr.
  std::shared_ptr<const HostImage> Get(const std::string& name);
  bool Erase(const std::string& name);
  std::uint64_t used_bytes() const;
  std::uint64_t budget_bytes() const { return budget_; }
  /// Names, most recently used first.
  std::vector<std::string> Names() const;

 private:
  struct Slot {
    std::shared_ptr<const HostImage> image;
    std::uint64_t bytes;
    std::list<std::string>::iterator lru;
  };
  const std::uint64_t budget_;
  mutable std::mutex mu_;  // guards lru_, slots_, used_
  std::list<std::string> lru_;  // front = most recently used
  std::unordered_map<std::string, Slot> slots_;
  std::uint64_t used_ = 0;
};

}  // namespace phos::image
