// Lifecycle classes and their retention plans (docs/image-format.md, FDP study).
//
//   latest  rotated: keep the newest N (by created time)
//   best    keep the top-k by the metric given with the checkpoint (higher
//           is better unless RetentionPolicy::higher_is_better is false;
//           images without a metric rank last)
//   manual  never deleted by phos
//
// Planning is a pure function so it can be tested without files; the
// catalog (image_catalog.h) lists a class directory and applies the plan,
// only after a successful commit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image.pb.h"

namespace phos::image {

enum class KeepClass { kLatest, kBest, kManual };

std::string_view KeepClassName(KeepClass c);  // "latest" | "best" | "manual"
/// Parses --keep; InvalidArgument names the accepted values.
Status ParseKeepClass(std::string_view text, KeepClass* out);
v1::KeepClass ToProto(KeepClass c);
/// KEEP_UNSPECIFIED maps to latest.
KeepClass FromProto(v1::KeepClass c);

/// Linux write-life hint for a class's files (F_SET_RW_HINT): latest is
/// short-lived, best long, manual extreme; devices with streams/FDP can then
/// place the classes apart.
std::uint64_t WriteLifeHint(KeepClass c);

struct RetentionPolicy {
  std::size_t keep_latest = 3;   // latest: newest N kept
  std::size_t keep_best = 3;     // best: top-k kept
  bool higher_is_better = true;  // best: metric direction
};

/// One image in a class directory.
struct CatalogEntry {
  std::string name;                 // directory name inside the class directory
  std::int64_t created_unix_ns = 0;
  std::optional<double> metric;
};

/// The names to delete from `entries` under `policy` for class `c`
/// (oldest/worst first). Ties keep the newer image.
std::vector<std::string> PlanRetention(KeepClass c, const RetentionPolicy& policy,
                                       std::vector<CatalogEntry> entries);

}  // namespace phos::image
