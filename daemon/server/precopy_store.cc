#include "server/precopy_store.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "common/hex.h"

namespace phos::server {

Status PrecopyStore::Add(const peer::v1::PrecopyData& d) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sealed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' already ended");
  if (failed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' failed earlier");
  Status s = AddLocked(d);
  failed_ = !s.ok();
  return s;
}

Status PrecopyStore::AddLocked(const peer::v1::PrecopyData& d) {
  if (d.copy_id() == 0) return Status::InvalidArgument("pre-copy chunk without a copy id");
  const std::string& data = d.data();
  if (d.copy_id() != last_id_) {
    // A new copy: ids increase, and the previous copy must be whole.
    if (d.copy_id() < last_id_) {
      return Status::InvalidArgument("pre-copy copy id " + std::to_string(d.copy_id()) + " after " +
                                     std::to_string(last_id_) + " (ids must increase)");
    }
    if (last_id_ != 0) {
      const Copy& prev = by_id_.at(last_id_);
      if (prev.received != prev.bytes.size()) {
        return Status::InvalidArgument("pre-copy copy " + std::to_string(last_id_) + " ended after " +
                                       std::to_string(prev.received) + " of " + std::to_string(prev.bytes.size()) +
                                       " bytes");
      }
    }
    if (d.offset() != 0) return Status::InvalidArgument("first chunk of pre-copy copy " + std::to_string(d.copy_id()) +
                                                        " is not at offset 0");
    if (d.bytes() == 0) return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + " is empty");
    // Checksums are required: they are what makes a pre-copied extent as
    // trustworthy as streamed bytes (proto/peer.proto).
    const std::uint64_t cb = d.chunk_bytes();
    if (cb == 0 || static_cast<std::uint64_t>(d.chunk_xxh3_size()) != d.bytes() / cb + (d.bytes() % cb != 0)) {
      return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + " of " +
                                     std::to_string(d.bytes()) + " bytes carries " +
                                     std::to_string(d.chunk_xxh3_size()) + " checksums of " + std::to_string(cb) +
                                     "-byte chunks");
    }
    // The source superseded its older copy of this address: it is dropped,
    // so a buffer copied in every round is held once — but only once the
    // new copy is accepted (a refused Add changes nothing).
    auto superseded = by_id_.end();
    if (auto it = by_address_.find(d.address()); it != by_address_.end()) superseded = by_id_.find(it->second);
    const std::uint64_t freed = superseded == by_id_.end() ? 0 : superseded->second.bytes.size();
    if (held_bytes_ - freed + d.bytes() > max_bytes_ || d.bytes() > max_bytes_) {
      return Status::OutOfMemory("pre-copy '" + name_ + "' would hold " +
                                 std::to_string(held_bytes_ - freed + d.bytes()) +
                                 " bytes, over this daemon's limit of " + std::to_string(max_bytes_) +
                                 " (--max-receive-bytes)");
    }
    if (superseded != by_id_.end()) {
      held_bytes_ -= freed;
      by_id_.erase(superseded);
    }
    Copy c;
    c.address = d.address();
    c.chunk_bytes = cb;
    c.chunk_xxh3.assign(d.chunk_xxh3().begin(), d.chunk_xxh3().end());
    c.bytes.resize(d.bytes());
    held_bytes_ += d.bytes();
    by_id_.emplace(d.copy_id(), std::move(c));
    by_address_[d.address()] = d.copy_id();
    last_id_ = d.copy_id();
  }
  Copy& c = by_id_.at(last_id_);
  if (d.bytes() != c.bytes.size() || d.address() != c.address) {
    return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + " changed its address or size");
  }
  if (d.offset() != c.received || data.size() > c.bytes.size() - c.received) {
    return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + ": chunk at offset " +
                                   std::to_string(d.offset()) + " of " + std::to_string(data.size()) +
                                   " bytes, expected offset " + std::to_string(c.received) + " within " +
                                   std::to_string(c.bytes.size()) + " bytes");
  }
  std::memcpy(c.bytes.data() + c.received, data.data(), data.size());
  c.received += data.size();
  if (c.received == c.bytes.size()) return CheckCopyLocked(last_id_, c);
  return Status::Ok();
}

Status PrecopyStore::CheckCopyLocked(std::uint64_t id, const Copy& c) const {
  for (std::size_t k = 0; k < c.chunk_xxh3.size(); ++k) {
    const std::uint64_t off = k * c.chunk_bytes;
    const std::uint64_t len = std::min<std::uint64_t>(c.chunk_bytes, c.bytes.size() - off);
    if (XXH3_64bits(c.bytes.data() + off, static_cast<std::size_t>(len)) != c.chunk_xxh3[k]) {
      return Status::Corruption("pre-copy copy " + std::to_string(id) + " of buffer " + Hex(c.address) + ": chunk " +
                                std::to_string(k) + " does not match its checksum (damaged in transit)");
    }
  }
  return Status::Ok();
}

Status PrecopyStore::Seal() {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' failed earlier");
  if (last_id_ != 0) {
    const Copy& c = by_id_.at(last_id_);
    if (c.received != c.bytes.size()) {
      return Status::InvalidArgument("pre-copy '" + name_ + "' ended inside copy " + std::to_string(last_id_));
    }
  }
  sealed_ = true;
  return Status::Ok();
}

Status PrecopyStore::Read(const peer::v1::PrecopyRef& ref, const char** bytes) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sealed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' has not ended yet");
  }
  // Sealed: immutable from here on.
  const auto it = by_id_.find(ref.copy_id());
  if (it == by_id_.end()) {
    return Status::NotFound("pre-copy '" + name_ + "' holds no copy " + std::to_string(ref.copy_id()) +
                            " (never sent, or superseded by a newer copy of its buffer)");
  }
  const std::string& b = it->second.bytes;
  if (ref.length() == 0 || ref.copy_offset() > b.size() || ref.length() > b.size() - ref.copy_offset()) {
    return Status::InvalidArgument("pre-copy reference [" + std::to_string(ref.copy_offset()) + ", +" +
                                   std::to_string(ref.length()) + ") is outside copy " +
                                   std::to_string(ref.copy_id()) + " of buffer " + Hex(it->second.address) + " (" +
                                   std::to_string(b.size()) + " bytes)");
  }
  *bytes = b.data() + ref.copy_offset();
  return Status::Ok();
}

std::uint64_t PrecopyStore::copies() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.size();
}

std::uint64_t PrecopyStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

}  // namespace phos::server
