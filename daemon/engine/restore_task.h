// In-place restore ("roll the session back") of a session's GPU state
// from a GPU-only image (docs/protocols.md "In-place restore").
//
//   Prepare()   caller's thread: ImageReader::Open (the manifest, gpu.img's
//               header and length) and decodes the session metadata. With
//               `verify_all` (engine::Verify, operations.h: the default
//               of in-place restores) also VerifyAll — every chunk's
//               checksum is checked BEFORE the session is touched; a
//               corrupt image is refused naming the buffer, chunk and file
//               offset. Either way every chunk is verified again as it is
//               loaded (ChunkLoader), before it reaches device memory.
//   Apply()     ON the session's consumer thread (control task), the
//               stop-the-world restore: MapBuffers(), then every extent
//               H2D (LoadExtents: ChunkLoader, reads in flight overlapping
//               the copies), synchronise.
// The pieces are public so the concurrent restore (concurrent_restore.h)
// shares them: it calls MapBuffers() and loads the globals with
// LoadExtents() in its control task, and reads buffer chunks itself.
//
//   MapBuffers()  synchronise every context; check that the image fits
//                 (each global exists at its address with its size; no
//                 new buffer overlaps a global or a buffer that is kept;
//                 for several GPUs, the image's home GPU is the session's)
//                 and give the session a context on each GPU of the image,
//                 before changing anything; free the buffers that are not
//                 in the image (or on another GPU than the image's), each
//                 in its own GPU's context, allocate the missing ones at
//                 their recorded addresses on their recorded GPUs. The
//                 buffer map is updated (republished by the session after
//                 the control task). Apply loads each extent in its GPU's
//                 context.
// Once MapBuffers() has started freeing, a later failure (an address taken
// by memory outside the session, a read error) leaves the session's device
// state undefined; the error says so (Undefined()).
//
// Threading: Prepare on the caller's thread; MapBuffers/LoadExtents/Apply
// on the consumer thread; reader() is thread-safe after Prepare (the
// concurrent restore's loader reads chunks on the caller's thread while
// the session runs); snapshot()/extent_of() are immutable after Prepare.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "engine/session_sections.h"
#include "engine/session_snapshot.h"
#include "image/image_reader.h"
#include "session/call_handlers.h"

namespace phos::engine {

class RestoreTask {
 public:
  explicit RestoreTask(Progress* progress) : progress_(progress) {}

  /// Staging buffers of the image reader (4 MiB each by default):
  /// ChunkLoader reads into all but two of them while it verifies one chunk
  /// and another is being copied to the device.
  static constexpr std::size_t kReadQueueDepth = 8;

  Status Prepare(const std::string& dir, bool verify_all);
  /// Consumer thread only (control task): the whole stop-the-world restore.
  Status Apply(session::SessionState& st);

  /// Consumer thread: synchronise, CheckFits, free/allocate (see above).
  /// Refusals before anything changed say "the session is unchanged";
  /// later failures are Undefined().
  Status MapBuffers(session::SessionState& st);
  /// Consumer thread: copies the given extents (manifest indices) H2D on a
  /// stream of its own (ChunkLoader: each chunk verified as it is read,
  /// before it is copied), and waits for them. Progress bytes are added per chunk. An extent
  /// whose address was relocated (RelocateGlobal) goes to its new address.
  Status LoadExtents(backend::Context* ctx, const std::vector<std::size_t>& extents);
  /// Consumer thread: LoadExtents of `extents`, each in the context of the
  /// GPU the session holds its range on (SessionDeviceOfExtent), then
  /// synchronises those contexts.
  Status LoadExtentsOnTheirDevices(session::SessionState& st, const std::vector<std::size_t>& extents);
  /// phosd's GPU the session holds manifest extent `i`'s range on now
  /// (after MapBuffers, or a fresh restore's recreation, which may have
  /// moved GPUs): a module variable's instance's GPU, else its buffer's.
  int SessionDeviceOfExtent(const session::SessionState& st, std::size_t i) const;
  /// Consumer thread, before LoadExtents: the module global the image has at
  /// `from` is at `to` in the restored context (a fresh restore where the
  /// backend placed it elsewhere and the app never held its address).
  void RelocateGlobal(std::uint64_t from, std::uint64_t to) { relocated_[from] = to; }
  /// `s` with the "device state is undefined" context.
  static Status Undefined(const Status& s);

  const RestoreResult& result() const { return result_; }
  RestoreResult* mutable_result() { return &result_; }
  const image::v1::Manifest& manifest() const { return reader_->manifest(); }
  /// Thread-safe after Prepare.
  image::ImageReader& reader() { return *reader_; }
  const SessionSnapshot& snapshot() const { return snap_; }
  /// The manifest extent holding the range at `address` (buffer or global);
  /// -1 when none.
  long extent_of(std::uint64_t address) const {
    auto it = extent_by_address_.find(address);
    return it == extent_by_address_.end() ? -1 : static_cast<long>(it->second);
  }

 private:
  Status CheckFits(const session::SessionState& st) const;
  /// Several GPUs (the session's or the image's process): the image's home
  /// GPU must be the session's (FailedPrecondition otherwise), and the
  /// session gets a context on every other GPU of the image.
  Status MatchDevices(session::SessionState& st) const;
  /// phosd's GPU the image has the range at `address` on (the session's
  /// home GPU for one not recorded elsewhere).
  int ImageDeviceOf(const session::SessionState& st, std::uint64_t address) const;
  /// The image's reserved ranges (cuMemAddressReserve), start -> bytes.
  std::map<std::uint64_t, std::uint64_t> ImageReservedRanges() const;
  /// Whether the session's buffer [address, +bytes) stays as it is: the
  /// image has it with the same size, inside the same reserved range (or
  /// outside all) in both.
  bool Kept(const session::SessionState& st, const std::map<std::uint64_t, std::uint64_t>& image_buffers,
            const std::map<std::uint64_t, std::uint64_t>& image_reserved, std::uint64_t address,
            std::uint64_t bytes) const;

  Progress* progress_;
  std::unique_ptr<image::ImageReader> reader_;
  SessionSnapshot snap_;
  std::map<std::uint64_t, std::size_t> extent_by_address_;  // device address -> manifest extent
  std::map<std::uint64_t, std::uint64_t> relocated_;  // image address -> restored address (consumer thread)
  ImageDevices image_devices_;  // the image's GPUs (immutable after Prepare)
  RestoreResult result_;
};

}  // namespace phos::engine
