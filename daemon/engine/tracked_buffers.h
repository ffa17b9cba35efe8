// The buffers one soft operation tracks (docs/protocols.md: every buffer has
// a C/R state per operation in flight), keyed by start address — for soft
// CoW, pieces of buffers (see piece_offset).
//
// Lock: `mu` (the operation's "engine lock") guards every field of every
// TrackedBuffer and the map itself, always — the operation's start filling
// it included (the one rule of soft_operation.h; the only exception, the
// recopy copier's staged copy, is documented at its fields); `cv` is
// notified whenever a state changes so calls waiting for a buffer wake. mu
// is held for state changes and short backend enqueues only
// (StreamWaitEvent, RecordEvent), never across a device or disk wait.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace phos::engine {

struct TrackedBuffer {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  bool global = false;           // a module global (restored in place, never allocated)
  std::uint8_t state = 0;        // the mode's state enum
  bool urgent = false;           // a call waits for it: the worker takes it next
  std::size_t image_index = 0;   // its extent in the image being written
  std::uint32_t first_use = 0;   // 1-based order of first use during the operation (0: not used)
  // Soft CoW tracks each buffer as pieces of one image chunk (4 MiB) each,
  // so a write shadows (or waits for) only the pieces it overlaps: an entry
  // is then one piece, `address`/`bytes` its range, and this where it
  // starts in its buffer (the image extent `image_index`).
  std::uint64_t piece_offset = 0;
  int device = 0;                            // phosd's GPU it lives on (a process may use several)
  backend::DevicePtr shadow = 0;             // device copy of the t1 content (on `device`)
  backend::EventHandle shadow_ready = 0;     // recorded after the D2D into the shadow ...
  backend::Context* shadow_ctx = nullptr;    // ... in this context: the writer's, whose stream queued the D2D
  std::uint64_t safe_from = std::numeric_limits<std::uint64_t>::max();  // admission seq from which writes are harmless
  // Soft recopy, per chunk of the image (CheckpointOptions::image
  // .chunk_bytes, 4 MiB by default): a write whose range is exact (a copy,
  // a memset, a spec-table library call) dirties the chunks it overlaps; a
  // kernel, a twin's miss or a call with no access set every chunk of what
  // it may write. The buffer is DIRTY while any chunk is.
  std::vector<bool> dirty;                   // one flag per chunk
  std::vector<std::uint32_t> dirtied_in;     // per chunk: the recopy round of its last write (0: before round 1)
  /// Streams that wrote it since the copier last took it: the copier waits
  /// for each one's write event (RecopyCheckpoint::stream_events_) before
  /// copying. One event per stream, not per buffer: writes of one buffer on
  /// two streams are unordered, so "the last write" alone would not do.
  /// Each stream with its context: stream handles are per context (every
  /// context has its default stream 0), and a process may use several.
  std::vector<std::pair<backend::Context*, backend::StreamHandle>> written_on;
  bool freed = false;                        // the app freed it during the operation
  // Not under mu: owned by the recopy copier while the buffer is COPYING,
  // by RecopyCheckpoint::Final/WriteImage after the copier ended.
  std::vector<std::byte> host;               // the last copy of each chunk (recopy stages in host memory)
  // Pre-copy (CheckpointOptions::precopy), per chunk: the copy its bytes in
  // `host` were handed to the sink in (copy_id 0: not handed over, or
  // overwritten since), where in that copy, and its checksum. Owned like
  // `host`.
  struct Handed {
    std::uint64_t copy_id = 0;
    std::uint64_t copy_offset = 0;
  };
  std::vector<Handed> handed;
  std::vector<std::uint64_t> host_xxh3;
};

class TrackedBuffers {
 public:
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, TrackedBuffer> by_address;  // guarded by mu

  /// mu held. Calls f(TrackedBuffer&) for each buffer overlapping
  /// [ptr, ptr + bytes) (bytes 0 counts as 1).
  template <typename F>
  void ForEachOverlapping(std::uint64_t ptr, std::uint64_t bytes, F&& f) {
    if (by_address.empty()) return;
    const std::uint64_t end = ptr + (bytes == 0 ? 1 : bytes);
    auto it = by_address.upper_bound(ptr);
    if (it != by_address.begin()) --it;
    for (; it != by_address.end() && it->first < end; ++it) {
      TrackedBuffer& b = it->second;
      if (b.address + b.bytes > ptr) f(b);
    }
  }
  /// mu held. The buffer containing `address`, or null.
  TrackedBuffer* Find(std::uint64_t address) {
    auto it = by_address.upper_bound(address);
    if (it == by_address.begin()) return nullptr;
    --it;
    return address < it->first + it->second.bytes ? &it->second : nullptr;
  }
};

}  // namespace phos::engine
