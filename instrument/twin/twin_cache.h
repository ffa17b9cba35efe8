// Cache of twin modules keyed by the PTX text (docs/protocols.md "Access sets (implemented)": "Twins are
// JIT-loaded once per kernel and cached by PTX hash").
//
// Key: XXH3-128 of the PTX text, its length, and XXH3-64 of the options that
// change the output (mode, kernel ids, default id). A 128-bit hash makes an
// accidental collision (which would hand back another module's twin)
// negligible without keeping a copy of every PTX text.
//
// Thread safety: every method may be called from any thread. One mutex
// (mu_) guards the map and the counters; it is never held while parsing,
// twinning or emitting, so a slow twin does not block lookups of others. Two
// threads missing on the same key both build the twin; the first insert wins
// and both get that entry (entries are immutable and shared).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "twin/twin_pass.h"

namespace phos::twin {

// One cached twin: the emitted PTX of the twin module and what the pass did.
struct TwinEntry {
  std::string ptx;
  TwinInfo info;
};

class TwinCache {
 public:
  struct Key {
    uint64_t text_lo = 0, text_hi = 0;  // XXH3-128 of the PTX text
    uint64_t text_size = 0;
    uint64_t options = 0;               // XXH3-64 of the options
    bool operator==(const Key&) const = default;
  };

  static Key KeyFor(std::string_view ptx_text, const TwinOptions& opts);

  // Returns the twin of ptx_text under opts, building it (parse, MakeTwin,
  // emit) on a miss. Errors from the parser or the pass are returned and not
  // cached.
  Status GetOrCreate(std::string_view ptx_text, const TwinOptions& opts,
                     std::shared_ptr<const TwinEntry>* out);

  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;
  void Clear();

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.text_lo ^ (k.options * 0x9E3779B97F4A7C15ull)); }
  };

  mutable std::mutex mu_;  // guards map_, hits_, misses_
  std::unordered_map<Key, std::shared_ptr<const TwinEntry>, KeyHash> map_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace phos::twin
