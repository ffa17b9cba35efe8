// PrecopyStore: the destination's side of one migration's pre-copy
// (PhosPeer.Precopy, proto/peer.proto; docs/migration.md "Pre-copy
// streaming"). The copies are written, as they arrive and while the app
// still runs at the source, into what becomes the received image's gpu.img:
// <root>/precopy/<name>.tmp/gpu.img. When the image arrives
// (ReceiveImage), ImageReceiver moves that file into the image and lays the
// image out around the copies already in it, so after the freeze only the
// bytes that were not pre-copied are written.
//
//   Open()            creates the directory and the file (a stale one of
//                     the same name is replaced); the first 4 KiB stay free
//                     for the gpu.img header
//   Add(PrecopyData)  the Precopy RPC thread: a copy's first chunk places it
//                     — over the previous copy of the same address when the
//                     size is the same (the source superseded it), else at
//                     the end; a copy is a run of whole image chunks of one
//                     buffer, and a shorter copy at the same address leaves
//                     the longer one before it in place (its other chunks
//                     may still be referenced) — and later chunks are
//                     written in order; each
//                     image chunk is checked against the checksums the first
//                     chunk carried as soon as its bytes are in (Corruption)
//   Seal()            the stream ended cleanly: no more Adds; Lookup may run
//   Lookup(id)        where copy `id` lies in the file (after Seal)
//   TakeFile()        the ReceiveImage thread, after Seal: the file's path
//                     and size; the caller moves the file away
// Dropped unsealed or unclaimed, the store removes its directory.
//
// Bounded: the file never grows past max_bytes (+ the header block): an
// Add past it fails (--max-receive-bytes). A failed Add poisons the store.
//
// Threading: mu_ guards every field. Adds come from one RPC thread; after
// Seal() the placement map is immutable, but Lookup still locks (cheap).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "peer.pb.h"

struct XXH3_state_s;

namespace phos::image {

class PrecopyStore {
 public:
  struct Placement {
    std::uint64_t file_offset = 0;  // 4 KiB aligned
    std::uint64_t bytes = 0;
    std::uint64_t address = 0;
  };

  /// `dir` = <root>/precopy/<name>.tmp (created; a stale one is removed).
  static Status Open(const std::string& name, const std::string& dir, std::uint64_t max_bytes,
                     std::unique_ptr<PrecopyStore>* out);
  ~PrecopyStore();  // removes the directory (and the file unless taken)
  PrecopyStore(const PrecopyStore&) = delete;
  PrecopyStore& operator=(const PrecopyStore&) = delete;

  /// A failed Add poisons the store (every later Add and Seal fails): the
  /// stream that fed it is over.
  Status Add(const peer::v1::PrecopyData& data);
  /// Fails when a copy is incomplete (the stream was cut inside one).
  Status Seal();
  /// Where copy `id` is; NotFound when never sent or superseded.
  Status Lookup(std::uint64_t copy_id, Placement* out) const;
  /// After Seal: the file's path and its end (4 KiB aligned). The caller
  /// renames the file away; the store no longer removes it.
  Status TakeFile(std::string* path, std::uint64_t* end);

  std::uint64_t copies() const;
  std::uint64_t bytes() const;  // bytes of the copies held now

 private:
  struct Copy {
    Placement where;
    std::uint64_t received = 0;  // contiguous bytes received
    std::uint64_t chunk_bytes = 0;
    std::vector<std::uint64_t> chunk_xxh3;
  };

  PrecopyStore() = default;
  Status AddLocked(const peer::v1::PrecopyData& data);
  /// mu_ held: hashes `n` bytes of the current copy at its `received`
  /// offset, checking each image chunk as it completes.
  Status HashLocked(Copy& c, const char* data, std::size_t n);

  std::string name_, dir_, path_;
  std::uint64_t max_bytes_ = 0;
  int fd_ = -1;
  mutable std::mutex mu_;  // guards everything below
  bool sealed_ = false;
  bool failed_ = false;    // an Add failed: no more Adds, never sealed
  bool taken_ = false;     // TakeFile moved the file out
  std::map<std::uint64_t, Copy> by_id_;                          // copy id -> copy
  std::unordered_map<std::uint64_t, std::uint64_t> by_address_;  // address -> newest copy id
  std::uint64_t last_id_ = 0;
  std::uint64_t end_ = 0;          // next free (aligned) file offset
  std::uint64_t held_bytes_ = 0;
  XXH3_state_s* xxh_ = nullptr;    // the current image chunk's running hash
};

}  // namespace phos::image
