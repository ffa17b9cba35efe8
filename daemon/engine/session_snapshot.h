// The session metadata a GPU-only image carries besides the buffer bytes,
// stored in the manifest's opaque `handles` section (docs/protocols.md
// "What a stop-the-world image holds").
//
// Encoding: UTF-8 text, one item per line, so `phos inspect --json` shows it
// readably and later versions can add line kinds (readers skip kinds they
// do not know):
//
//   phos-session 1
//   buffer 0x7f0000000000 1048576      an allocation (cudaMalloc)
//   global 0x7f00ffff0000 64           a module __device__ variable
//   stream 3                           a stream's virtual id
//   event 5
//   module 1
//   function 7 1                       function id, its module id
//   first-use 0x7f0000000000           buffers in the order the app first
//                                      used them after t1 (soft modes): a
//                                      concurrent restore loads them in
//                                      this order
//
// Buffers and globals both have extents in gpu.img (in the manifest's
// `buffers`, buffers first); a global's extent is restored into the
// session's existing global at the same address, never allocated or freed.
// Streams/events/modules/functions are listed here by id only; what a
// restore into a FRESH session needs to recreate them (module images,
// kernel names, creation flags, global symbols) is captured with the
// snapshot (`objects`) and stored in the manifest's `streams` and
// `modules` sections (engine/session_sections.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "session/call_handlers.h"

namespace phos::image::v1 {
class Manifest;
}  // namespace phos::image::v1

namespace phos::engine {

struct DeviceRange {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
};

/// Everything the app's virtual ids refer to, as a restore into a fresh
/// session recreates it (engine/fresh_restore.h). Captured by
/// CaptureSnapshot; not part of the `handles` text (DecodeSnapshot leaves
/// it empty). Immutable after capture: module images are shared with the
/// session (they never change once loaded).
struct SessionObjects {
  struct Module {
    std::uint32_t id = 0;
    std::shared_ptr<const std::vector<std::byte>> image;
  };
  struct Stream {
    std::uint32_t id = 0, flags = 0;
    std::int32_t priority = 0;
  };
  struct Event {
    std::uint32_t id = 0, flags = 0;
  };
  struct Function {
    std::uint32_t id = 0, module_id = 0;
    std::string name;
    std::vector<std::pair<std::int32_t, std::int32_t>> attributes;  // (wire attribute id, value)
  };
  struct Global {
    std::uint64_t address = 0, bytes = 0;
    std::uint32_t module_id = 0;  // 0: unknown origin (cannot be resolved again)
    std::string name;
  };
  std::vector<Module> modules;      // ascending id
  std::vector<Stream> streams;      // ascending id
  std::vector<Event> events;        // ascending id
  std::vector<Function> functions;  // ascending id
  std::vector<Global> globals;      // ascending address
};

struct SessionSnapshot {
  std::vector<DeviceRange> buffers;  // ascending address
  std::vector<DeviceRange> globals;  // ascending address
  std::vector<std::uint32_t> streams, events, modules;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> functions;  // (function id, module id)
  std::vector<std::uint64_t> first_use;  // buffer addresses, first used first (may be empty)
  SessionObjects objects;                // for a fresh restore (see above)
};

/// What the session holds now (consumer thread).
SessionSnapshot CaptureSnapshot(const session::SessionState& st);
std::string EncodeSnapshot(const SessionSnapshot& s);
/// Corruption naming the line when the text is malformed.
Status DecodeSnapshot(const std::string& text, SessionSnapshot* out);

/// Sets the manifest's handles, streams and modules sections from `snap`
/// (every checkpoint path calls this; session_sections.h, where it lives).
void SetSessionSections(const SessionSnapshot& snap, image::v1::Manifest* manifest);

}  // namespace phos::engine
