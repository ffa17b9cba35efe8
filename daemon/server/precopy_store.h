// PrecopyStore: the destination's memory of one migration's pre-copied
// buffer copies (PhosPeer.Precopy, proto/peer.proto; docs/migration.md
// "Pre-copy streaming"), until the image that refers to them is received.
//
//   Add(PrecopyData)  the Precopy RPC thread appends chunks; a copy of an
//                     address already held replaces the older copy (the
//                     source superseded it) once its first chunk arrives;
//                     a complete copy is checked against the chunk
//                     checksums its first chunk carried (Corruption if not)
//   Seal()            the stream ended cleanly: no more Adds; from now on
//                     the store is immutable and Read may be called
//   Read(ref)         the ReceiveImage thread: the bytes a PrecopyRef names
//
// Bounded: the bytes held (copies in progress included) never exceed
// max_bytes (the daemon's --max-receive-bytes); an Add past it fails.
//
// Threading: mu_ guards everything until Seal(). After Seal() nothing
// changes, so Read returns pointers into the store without the lock (it
// checks sealed_ under the lock first); the store is shared through a
// shared_ptr, so the bytes live as long as a reader holds it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "peer.pb.h"

namespace phos::server {

class PrecopyStore {
 public:
  PrecopyStore(std::string name, std::uint64_t max_bytes) : name_(std::move(name)), max_bytes_(max_bytes) {}

  /// A failed Add poisons the store (every later Add and Seal fails): the
  /// stream that fed it is over.
  Status Add(const peer::v1::PrecopyData& data);
  /// Fails when a copy is incomplete (the stream was cut inside one).
  Status Seal();
  /// The bytes of `ref`; only after Seal(). Errors name the copy.
  Status Read(const peer::v1::PrecopyRef& ref, const char** bytes) const;

  std::uint64_t copies() const;
  std::uint64_t bytes() const;  // held now
  const std::string& name() const { return name_; }

 private:
  struct Copy {
    std::uint64_t address = 0;
    std::string bytes;          // sized to the whole copy at its first chunk
    std::uint64_t received = 0; // contiguous bytes received
    std::uint64_t chunk_bytes = 0;
    std::vector<std::uint64_t> chunk_xxh3;  // checked once the copy is complete
  };
  Status AddLocked(const peer::v1::PrecopyData& data);
  /// mu_ held: the copy just completed; its bytes against its checksums.
  Status CheckCopyLocked(std::uint64_t id, const Copy& c) const;

  const std::string name_;
  const std::uint64_t max_bytes_;
  mutable std::mutex mu_;  // guards the fields below until sealed_
  bool sealed_ = false;
  bool failed_ = false;  // an Add failed: no more Adds, never sealed
  std::map<std::uint64_t, Copy> by_id_;                        // copy id -> copy
  std::unordered_map<std::uint64_t, std::uint64_t> by_address_;  // address -> newest copy id
  std::uint64_t last_id_ = 0;
  std::uint64_t held_bytes_ = 0;
};

}  // namespace phos::server
