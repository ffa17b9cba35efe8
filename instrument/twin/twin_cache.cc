#include "twin/twin_cache.h"

#include <xxhash.h>

#include <utility>

#include "ptx/ptx_emitter.h"
#include "ptx/ptx_parser.h"

namespace phos::twin {

TwinCache::Key TwinCache::KeyFor(std::string_view ptx_text, const TwinOptions& opts) {
  Key k;
  XXH128_hash_t h = XXH3_128bits(ptx_text.data(), ptx_text.size());
  k.text_lo = h.low64;
  k.text_hi = h.high64;
  k.text_size = ptx_text.size();
  // Options in a canonical byte string (kernel_ids is an ordered map).
  std::string o;
  o.push_back(static_cast<char>(opts.mode));
  o.append(reinterpret_cast<const char*>(&opts.default_kernel_id), sizeof opts.default_kernel_id);
  for (const auto& [name, id] : opts.kernel_ids) {
    uint64_t len = name.size();
    o.append(reinterpret_cast<const char*>(&len), sizeof len);
    o.append(name);
    o.append(reinterpret_cast<const char*>(&id), sizeof id);
  }
  k.options = XXH3_64bits(o.data(), o.size());
  return k;
}

Status TwinCache::GetOrCreate(std::string_view ptx_text, const TwinOptions& opts,
                              std::shared_ptr<const TwinEntry>* out) {
  const Key key = KeyFor(ptx_text, opts);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(key); it != map_.end()) {
      ++hits_;
      *out = it->second;
      return Status::Ok();
    }
    ++misses_;
  }
  // Build without the lock.
  ptx::Module in, twin;
  PHOS_RETURN_IF_ERROR(ptx::ParseModule(ptx_text, &in));
  auto entry = std::make_shared<TwinEntry>();
  PHOS_RETURN_IF_ERROR(MakeTwin(in, opts, &twin, &entry->info));
  entry->ptx = ptx::EmitModule(twin);

  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = map_.emplace(key, std::move(entry));
  *out = it->second;
  return Status::Ok();
}

size_t TwinCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}
uint64_t TwinCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
uint64_t TwinCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
void TwinCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
}

}  // namespace phos::twin
