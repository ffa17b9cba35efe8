// PrecopySink: where soft recopy hands every buffer copy a round stages, as
// soon as the copy is known good — live migration's pre-copy (issue #6,
// docs/migration.md "Pre-copy streaming"). The migration's sink streams the
// copy to the destination daemon while the app keeps running, so at the
// final quiesce only what was written since has to travel.
//
// Contract with RecopyCheckpoint (CheckpointOptions::precopy):
//   - Staged() runs on the copier's thread (the caller of engine::Checkpoint),
//     never on the consumer thread, one call at a time, with no engine lock
//     held. The data is valid only during the call.
//   - A copy handed over gets a copy id (1, 2, ...; unique within one
//     checkpoint). A buffer copied again later gets a new id; the older copy
//     is superseded.
//   - At t2 every image extent whose staged copy is still current is written
//     as a reference to its copy id instead of bytes
//     (ImageWriter::WriteElsewhere; CheckpointResult::precopied lists them):
//     the image on the source is then incomplete until the receiver fills
//     those extents from the copies it kept.
//   - A failing Staged() fails the checkpoint (no image; the app runs on).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace phos::engine {

struct StagedCopy {
  std::uint64_t copy_id = 0;
  std::uint64_t address = 0;      // device address of the buffer
  std::uint64_t bytes = 0;
  const std::byte* data = nullptr;
  /// XXH3-64 of each chunk of `chunk_bytes` (the image's chunk size), as
  /// the image's manifest will record them.
  std::uint64_t chunk_bytes = 0;
  const std::vector<std::uint64_t>* chunk_xxh3 = nullptr;
};

class PrecopySink {
 public:
  virtual ~PrecopySink() = default;
  virtual Status Staged(const StagedCopy& copy) = 0;
};

/// One extent of the image written as a reference (see above).
struct PrecopiedExtent {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t copy_id = 0;
};

}  // namespace phos::engine
