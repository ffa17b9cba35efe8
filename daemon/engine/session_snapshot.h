// The session metadata a GPU-only image carries besides the buffer bytes,
// stored in the manifest as its SessionIndex (proto/image.proto; docs/
// protocols.md "What a stop-the-world image holds"): the allocations
// (cudaMalloc) and module __device__ variables with their sizes, and the
// virtual ids of streams, events, modules and functions (with their
// module). The buffers' first-use order is the manifest's own
// `first_use_order`. (Image format 1 held this as text, the `handles`
// section.)
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
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "session/call_handlers.h"

namespace phos::image::v1 {
class Manifest;
class SessionIndex;
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
    int device = 0;  // phosd's ordinal of its GPU
  };
  struct Event {
    std::uint32_t id = 0, flags = 0;
    int device = 0;
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
    bool address_private = false;  // the app was never given the address (GlobalRecord)
    int device = 0;                // the GPU of the module instance holding it
  };
  struct Texture {
    std::uint64_t handle = 0;
    session::SessionState::TextureObject object;
  };
  std::vector<Module> modules;      // ascending id
  std::vector<Stream> streams;      // ascending id
  std::vector<Event> events;        // ascending id
  std::vector<Function> functions;  // ascending id
  std::vector<Global> globals;      // ascending address
  std::vector<Texture> textures;    // ascending handle
  std::uint64_t device_heap = 0;    // a buffer's address (0: none)
  int device = 0;                   // phosd's ordinal of the session's (home) GPU
  // Several GPUs in one process: the other GPUs it used (ascending), its
  // buffers on them (start -> GPU; home buffers are not listed), and the
  // app's GPU ordinals that mean another of phosd's (device_aliases).
  std::vector<int> other_devices;
  std::map<std::uint64_t, int> buffer_devices;
  std::map<int, int> device_aliases;
  struct Communicator {
    std::uint32_t app_id = 0;
    backend::CommunicatorId unique_id{};
    int nranks = 0, rank = 0;
  };
  std::vector<Communicator> communicators;  // ascending app id

  /// phosd's GPU of the range (buffer or module variable) starting at
  /// `address`: its recorded GPU, else the home one.
  int DeviceOf(std::uint64_t address) const;
};

struct SessionSnapshot {
  std::vector<DeviceRange> buffers;  // ascending address
  std::vector<DeviceRange> globals;  // ascending address
  std::vector<DeviceRange> reserved_ranges;  // cuMemAddressReserve, ascending address
  std::vector<std::uint32_t> streams, events, modules;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> functions;  // (function id, module id)
  std::vector<std::uint64_t> first_use;  // buffer addresses, first used first (may be empty)
  SessionObjects objects;                // for a fresh restore (see above)
};

/// Synchronises every context of the session (home first); a sticky error
/// in any is FailedPrecondition naming its GPU, ending with `refusal`
/// (what it means for the caller).
Status QuiesceAllDevices(session::SessionState& st,
                         const char* refusal = "its device state cannot be checkpointed");

/// What the session holds now (consumer thread).
SessionSnapshot CaptureSnapshot(const session::SessionState& st);
/// The manifest's SessionIndex of `s` (its first_use goes to the manifest's
/// first_use_order: SetSessionSections).
void EncodeSnapshot(const SessionSnapshot& s, image::v1::SessionIndex* out);
/// Corruption naming the range when one is empty or wraps. `out->first_use`
/// stays empty (the caller takes the manifest's first_use_order).
Status DecodeSnapshot(const image::v1::SessionIndex& index, SessionSnapshot* out);

/// Sets the manifest's handles, streams and modules sections from `snap`
/// (every checkpoint path calls this; session_sections.h, where it lives).
void SetSessionSections(const SessionSnapshot& snap, image::v1::Manifest* manifest);

}  // namespace phos::engine
