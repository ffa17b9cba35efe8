// The twin-kernel calling convention and report format (docs/instrument.md,
// "Twin kernels"; docs/protocols.md "Access sets (implemented)" "Validation"). This header is THE contract between
// the twin pass (which generates device code), the interposer (which launches
// twins) and phosd (which reads reports). Everything here is little-endian
// device memory, naturally aligned.
//
// Kernel parameters. A twin kernel has every parameter of the original
// kernel, in the same order and with the same layout, followed by exactly
// these three (appended, so the original parameters keep their offsets):
//
//   .param .u64 __phos_ranges    device pointer to `nranges` Range records
//                                {u64 begin, u64 end}: half-open [begin, end)
//                                byte ranges in CUDA device-pointer numbering
//                                (what cudaMalloc returns; on every current
//                                GPU the global window of the generic space
//                                is the identity, so these equal the global
//                                addresses the kernel uses). Any order; may
//                                overlap. Read only by the twin.
//   .param .u32 __phos_nranges   number of Range records (0: every global
//                                access is a miss)
//   .param .u64 __phos_report    device pointer to a report buffer (below),
//                                8-byte aligned
//
// The twin of kernel K is named TwinKernelName(K) = K + "__phos_twin" and
// lives in a module of its own (the pass replaces every kernel of a module).
//
// Report buffer: a ReportHeader followed by `capacity` ReportRecords.
//   header.capacity   records the buffer holds; written by the host
//   header.count      0 before the launch (host); every miss does
//                     atom.global.add.u32 on it to reserve a slot and writes
//                     the record only if slot < capacity. So after the kernel
//                     min(count, capacity) records are valid and
//                     count - capacity (if positive) misses were dropped.
//   header.kernel_id  written by the host (the id of the launched kernel; the
//                     twin never writes it); informational.
//   header.flags      written by the host, ReportFlags; the twin never reads
//                     or writes it.
//   record            {u32 kernel_id (the TwinOptions id of the kernel whose
//                     launch made the access, also for accesses inside
//                     device functions), u32 is_write (1: st/atom/red or the
//                     destination of a copy; 0: ld/ldu or a copy source),
//                     u64 address (first byte of the access)}.
// A buffer may be shared by several launches: records carry their kernel id.
// Records are written in no particular order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace phos::twin {

// Names of the appended kernel parameters, in order.
inline constexpr std::string_view kRangesParam = "__phos_ranges";
inline constexpr std::string_view kNRangesParam = "__phos_nranges";
inline constexpr std::string_view kReportParam = "__phos_report";
// Device functions (.func) get the three above plus this one (a .b32 kernel
// id, so records made inside a function name the launched kernel). .func
// signatures are private to the twin module: nothing outside calls them.
inline constexpr std::string_view kKernelIdParam = "__phos_kernel_id";
// Suffix of twin kernel names.
inline constexpr std::string_view kTwinSuffix = "__phos_twin";
// Kernel id used for kernels TwinOptions gives no id for.
inline constexpr uint32_t kUnknownKernelId = 0xFFFFFFFFu;

inline std::string TwinKernelName(std::string_view kernel) {
  std::string s(kernel);
  s += kTwinSuffix;
  return s;
}

struct Range {
  uint64_t begin = 0;  // first byte
  uint64_t end = 0;    // one past the last byte
};
static_assert(sizeof(Range) == 16);

enum ReportFlags : uint32_t {
  kReportFlagReads = 1u << 0,  // the launched twin checks loads too (kReadsAndWrites)
};

struct ReportHeader {
  uint32_t capacity = 0;
  uint32_t count = 0;
  uint32_t kernel_id = 0;
  uint32_t flags = 0;
};
static_assert(sizeof(ReportHeader) == 16);

struct ReportRecord {
  uint32_t kernel_id = 0;
  uint32_t is_write = 0;
  uint64_t address = 0;
};
static_assert(sizeof(ReportRecord) == 16);

// Byte offsets the generated PTX uses (kept in sync with the structs).
inline constexpr uint32_t kHeaderCapacityOffset = 0;
inline constexpr uint32_t kHeaderCountOffset = 4;
inline constexpr uint32_t kRecordsOffset = sizeof(ReportHeader);
inline constexpr uint32_t kRecordSize = sizeof(ReportRecord);
inline constexpr uint32_t kRecordKernelIdOffset = 0;
inline constexpr uint32_t kRecordIsWriteOffset = 4;
inline constexpr uint32_t kRecordAddressOffset = 8;
inline constexpr uint32_t kRangeSize = sizeof(Range);
static_assert(offsetof(ReportHeader, count) == kHeaderCountOffset);
static_assert(offsetof(ReportRecord, is_write) == kRecordIsWriteOffset);
static_assert(offsetof(ReportRecord, address) == kRecordAddressOffset);

// Bytes of a report buffer holding `capacity` records.
inline constexpr size_t ReportBytes(uint32_t capacity) {
  return sizeof(ReportHeader) + static_cast<size_t>(capacity) * sizeof(ReportRecord);
}

// Host-side view of a report read back from the device.
struct Report {
  ReportHeader header;
  std::vector<ReportRecord> records;  // min(count, capacity) records
  uint32_t dropped = 0;               // count - capacity when count > capacity

  bool overflowed() const { return dropped != 0; }
  uint64_t misses() const { return records.size() + static_cast<uint64_t>(dropped); }
};

// Writes an empty report header (count 0) into buf for a launch. buf must
// hold at least ReportBytes(capacity) bytes; InvalidArgument otherwise.
Status InitReport(void* buf, size_t bytes, uint32_t capacity, uint32_t kernel_id, uint32_t flags);

// Decodes a report buffer copied back from the device. The buffer must hold
// the header and min(count, capacity) records (it may be the full
// ReportBytes(capacity) or just that prefix); anything shorter, or a record
// whose is_write is not 0/1, is Corruption and leaves *out unspecified.
Status DecodeReport(const void* buf, size_t bytes, Report* out);

}  // namespace phos::twin
