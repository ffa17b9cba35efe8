#include "twin/twin_abi.h"

#include <algorithm>
#include <cstring>

namespace phos::twin {

Status InitReport(void* buf, size_t bytes, uint32_t capacity, uint32_t kernel_id, uint32_t flags) {
  if (buf == nullptr) return Status::InvalidArgument("report buffer is null");
  if (bytes < ReportBytes(capacity)) {
    return Status::InvalidArgument("report buffer of " + std::to_string(bytes) + " bytes cannot hold " +
                                   std::to_string(capacity) + " records (needs " +
                                   std::to_string(ReportBytes(capacity)) + ")");
  }
  ReportHeader h;
  h.capacity = capacity;
  h.count = 0;
  h.kernel_id = kernel_id;
  h.flags = flags;
  std::memcpy(buf, &h, sizeof h);
  return Status::Ok();
}

Status DecodeReport(const void* buf, size_t bytes, Report* out) {
  if (buf == nullptr && bytes != 0) return Status::InvalidArgument("report buffer is null");
  if (bytes < sizeof(ReportHeader)) {
    return Status::Corruption("report truncated: " + std::to_string(bytes) + " bytes, header needs " +
                              std::to_string(sizeof(ReportHeader)));
  }
  const auto* p = static_cast<const unsigned char*>(buf);
  std::memcpy(&out->header, p, sizeof(ReportHeader));
  const uint32_t valid = std::min(out->header.count, out->header.capacity);
  const uint64_t need = sizeof(ReportHeader) + static_cast<uint64_t>(valid) * sizeof(ReportRecord);
  if (bytes < need) {
    return Status::Corruption("report truncated: " + std::to_string(bytes) + " bytes, " +
                              std::to_string(valid) + " records need " + std::to_string(need));
  }
  out->dropped = out->header.count > out->header.capacity ? out->header.count - out->header.capacity : 0;
  out->records.resize(valid);
  if (valid != 0) std::memcpy(out->records.data(), p + sizeof(ReportHeader), valid * sizeof(ReportRecord));
  for (uint32_t i = 0; i < valid; ++i) {
    if (out->records[i].is_write > 1) {
      return Status::Corruption("report record " + std::to_string(i) + " has is_write " +
                                std::to_string(out->records[i].is_write) + " (expected 0 or 1)");
    }
  }
  return Status::Ok();
}

}  // namespace phos::twin
