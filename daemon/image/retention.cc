#include "image/retention.h"

#include <fcntl.h>

#include <algorithm>
#include <cmath>

namespace phos::image {

std::string_view KeepClassName(KeepClass c) {
  switch (c) {
    case KeepClass::kLatest: return "latest";
    case KeepClass::kBest: return "best";
    case KeepClass::kManual: return "manual";
  }
  return "latest";
}

Status ParseKeepClass(std::string_view text, KeepClass* out) {
  for (KeepClass c : {KeepClass::kLatest, KeepClass::kBest, KeepClass::kManual}) {
    if (text == KeepClassName(c)) {
      *out = c;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("--keep must be latest, best or manual (got '" +
                                 std::string(text) + "')");
}

v1::KeepClass ToProto(KeepClass c) {
  switch (c) {
    case KeepClass::kLatest: return v1::KEEP_LATEST;
    case KeepClass::kBest: return v1::KEEP_BEST;
    case KeepClass::kManual: return v1::KEEP_MANUAL;
  }
  return v1::KEEP_LATEST;
}

KeepClass FromProto(v1::KeepClass c) {
  switch (c) {
    case v1::KEEP_BEST: return KeepClass::kBest;
    case v1::KEEP_MANUAL: return KeepClass::kManual;
    default: return KeepClass::kLatest;
  }
}

std::uint64_t WriteLifeHint(KeepClass c) {
  switch (c) {
    case KeepClass::kLatest: return RWH_WRITE_LIFE_SHORT;
    case KeepClass::kBest: return RWH_WRITE_LIFE_LONG;
    case KeepClass::kManual: return RWH_WRITE_LIFE_EXTREME;
  }
  return RWH_WRITE_LIFE_NOT_SET;
}

std::vector<std::string> PlanRetention(KeepClass c, const RetentionPolicy& policy,
                                       std::vector<CatalogEntry> entries) {
  std::vector<std::string> doomed;
  std::size_t keep = 0;
  // A NaN metric cannot be ranked: treat it as no metric.
  for (CatalogEntry& e : entries) {
    if (e.metric && std::isnan(*e.metric)) e.metric.reset();
  }
  switch (c) {
    case KeepClass::kManual:
      return doomed;
    case KeepClass::kLatest:
      keep = policy.keep_latest;
      // Newest first; name breaks ties so the plan is deterministic.
      std::sort(entries.begin(), entries.end(), [](const CatalogEntry& a, const CatalogEntry& b) {
        if (a.created_unix_ns != b.created_unix_ns) return a.created_unix_ns > b.created_unix_ns;
        return a.name > b.name;
      });
      break;
    case KeepClass::kBest:
      keep = policy.keep_best;
      // Best first: with a metric before without, then by metric, then newer.
      std::sort(entries.begin(), entries.end(),
                [&](const CatalogEntry& a, const CatalogEntry& b) {
                  if (a.metric.has_value() != b.metric.has_value()) return a.metric.has_value();
                  if (a.metric && *a.metric != *b.metric) {
                    return policy.higher_is_better ? *a.metric > *b.metric
                                                   : *a.metric < *b.metric;
                  }
                  if (a.created_unix_ns != b.created_unix_ns) {
                    return a.created_unix_ns > b.created_unix_ns;
                  }
                  return a.name > b.name;
                });
      break;
  }
  // Delete from the worst/oldest end.
  for (std::size_t i = entries.size(); i > keep; --i) doomed.push_back(entries[i - 1].name);
  return doomed;
}

}  // namespace phos::image
