// The destination's parked lazy-pages connections (docs/migration.md "Lazy
// pages"): a source opens its DATA_CHANNEL_LAZY_PAGES connection for image
// NAME before it freezes the app; the connection waits here until the
// RestoreImage of NAME takes it and hands it to `criu lazy-pages`.
//
// Thread safety: all methods may be called from any thread (one mutex,
// `mu_`, a leaf).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "common/status.h"

namespace phos::peer {

class LazyPageConnections {
 public:
  /// A parked connection nobody claimed for this long is closed (checked
  /// whenever one is parked). Long: the source parks it before its recopy
  /// rounds, which may take minutes.
  static constexpr std::chrono::minutes kTtl{30};
  /// At most this many parked at once (each is an open socket).
  static constexpr std::size_t kMaxParked = 64;

  LazyPageConnections() = default;
  ~LazyPageConnections();  // closes what is still parked
  LazyPageConnections(const LazyPageConnections&) = delete;
  LazyPageConnections& operator=(const LazyPageConnections&) = delete;

  /// Takes ownership of `fd` for image `name`. AlreadyExists when one is
  /// parked for `name` already; Unavailable when kMaxParked are; `fd` is
  /// closed on any refusal. First drops the parked connections whose
  /// source closed them (a migration that failed before its restore) or
  /// that waited kTtl.
  Status Park(const std::string& name, int fd);

  /// The connection parked for `name` (the caller owns it now), or -1.
  int Take(const std::string& name);

 private:
  struct Parked {
    int fd = -1;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex mu_;
  std::map<std::string, Parked> parked_;  // guarded by mu_
};

}  // namespace phos::peer
