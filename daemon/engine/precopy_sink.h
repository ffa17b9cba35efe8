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
//   - A copy is a run of whole image chunks of one buffer (dirtiness is per
//     chunk: a round copies only the chunks written since their last copy),
//     and gets a copy id (1, 2, ...; unique within one checkpoint). A chunk
//     copied again later is in a newer copy; the older one is superseded
//     for that chunk.
//   - At t2 every image chunk whose staged copy is still current is written
//     as a reference to (copy id, offset in that copy) instead of bytes
//     (ImageWriter::WriteElsewhere; CheckpointResult::precopied lists the
//     runs): the image on the source is then incomplete until the receiver
//     fills those chunks from the copies it kept.
//   - A failing Staged() fails the checkpoint (no image; the app runs on).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace phos::engine {

struct StagedCopy {
  std::uint64_t copy_id = 0;
  std::uint64_t address = 0;      // device address of its first byte (a chunk boundary of its buffer)
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

/// A run of image chunks written as a reference (see above): device bytes
/// [address, +bytes) are bytes [copy_offset, +bytes) of copy `copy_id`.
struct PrecopiedExtent {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t copy_id = 0;
  std::uint64_t copy_offset = 0;
};

}  // namespace phos::engine
