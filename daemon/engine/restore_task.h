// In-place restore ("roll the session back") of a session's GPU state
// from a GPU-only image (docs/protocols.md "In-place restore").
//
//   Prepare()   caller's thread: ImageReader::Open + VerifyAll — every
//               chunk's checksum is checked BEFORE the session is touched;
//               a corrupt or truncated image is refused naming the buffer,
//               chunk and file offset. Also decodes the session metadata.
//   Apply()     ON the session's consumer thread (control task): synchronise;
//               check that the image fits (each global exists at its
//               address with its size; no new buffer overlaps a global or a
//               buffer that is kept) before changing anything; free the
//               buffers that are not in the image, allocate the missing
//               ones at their recorded addresses, copy every extent H2D in
//               chunks (each chunk re-verified as it is read), synchronise.
//               The buffer map is updated and republished.
// Once Apply() has started freeing, a later failure (an address taken by
// memory outside the session, a read error) leaves the session's device
// state undefined; the error says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/progress.h"
#include "engine/session_snapshot.h"
#include "image/image_reader.h"
#include "session/call_handlers.h"

namespace phos::engine {

struct RestoreResult {
  std::string dir;
  std::uint64_t stall_us = 0;
  std::uint64_t bytes = 0;
  std::uint32_t buffers = 0;        // buffers in the image
  std::uint32_t allocated = 0;      // of those, allocated anew
  std::uint32_t freed = 0;          // session buffers not in the image, freed
  std::uint32_t globals = 0;
  std::uint64_t source_pid = 0;     // the pid the image was taken from
};

class RestoreTask {
 public:
  explicit RestoreTask(Progress* progress) : progress_(progress) {}

  Status Prepare(const std::string& dir);
  /// Consumer thread only (control task).
  Status Apply(session::SessionState& st);

  const RestoreResult& result() const { return result_; }
  const image::v1::Manifest& manifest() const { return reader_->manifest(); }

 private:
  Status CheckFits(const session::SessionState& st) const;

  Progress* progress_;
  std::unique_ptr<image::ImageReader> reader_;
  SessionSnapshot snap_;
  RestoreResult result_;
};

}  // namespace phos::engine
