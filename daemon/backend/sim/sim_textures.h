// The texture and surface objects of one sim context (interp::TextureTable).
//
// Copy-on-write: the context holds the current table under its mu_ and
// replaces it on every create and destroy; each kernel launch captures the
// table as it was when the launch was enqueued, so a kernel sees exactly
// the objects that existed when the app launched it (CUDA's order: an
// object destroyed after the launch call still serves the launch), and
// lookups during a launch take no lock (the snapshot never changes).
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "common/status.h"
#include "interp/texture.h"

namespace phos::wire {
struct TextureDesc;
}  // namespace phos::wire

namespace phos::backend::sim {

class SimTextureTable final : public interp::TextureTable {
 public:
  const interp::TextureDesc* Find(std::uint64_t handle) const override {
    auto it = objects_.find(handle);
    return it == objects_.end() ? nullptr : &it->second;
  }

  /// A copy with `handle` -> `desc` added / with `handle` removed.
  std::shared_ptr<const SimTextureTable> With(std::uint64_t handle, const interp::TextureDesc& desc) const;
  std::shared_ptr<const SimTextureTable> Without(std::uint64_t handle) const;
  bool Contains(std::uint64_t handle) const { return objects_.count(handle) != 0; }
  bool empty() const { return objects_.empty(); }

 private:
  std::map<std::uint64_t, interp::TextureDesc> objects_;
};

/// The interpreter's view of a checked wire descriptor.
interp::TextureDesc ToInterpTexture(const wire::TextureDesc& desc, bool surface);

}  // namespace phos::backend::sim
