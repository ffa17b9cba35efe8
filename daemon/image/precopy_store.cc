#include "image/precopy_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include <spdlog/spdlog.h>

#include "common/hex.h"
#include "common/xxh3.h"
#include "image/file_util.h"
#include "image/image_layout.h"

namespace phos::image {

Status PrecopyStore::Open(const std::string& name, const std::string& dir, std::uint64_t max_bytes,
                          std::unique_ptr<PrecopyStore>* out) {
  std::unique_ptr<PrecopyStore> s(new PrecopyStore());
  s->name_ = name;
  s->dir_ = dir;
  s->path_ = dir + "/" + std::string(image::kGpuImgName);
  s->max_bytes_ = max_bytes;
  s->end_ = image::kGpuImgHeaderBlock;  // the header is written when the image is laid out
  const std::string parent = dir.substr(0, dir.rfind('/'));
  if (mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) return image::ErrnoError("mkdir", parent, errno);
  PHOS_RETURN_IF_ERROR(image::RemoveTree(dir));  // a dead source's leftover of the same name
  if (mkdir(dir.c_str(), 0700) != 0) return image::ErrnoError("mkdir", dir, errno);
  s->fd_ = open(s->path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (s->fd_ < 0) return image::ErrnoError("create", s->path_, errno);
  s->xxh_ = XXH3_createState();
  if (s->xxh_ == nullptr) return Status::OutOfMemory("XXH3_createState");
  *out = std::move(s);
  return Status::Ok();
}

PrecopyStore::~PrecopyStore() {
  if (fd_ >= 0) close(fd_);
  if (xxh_ != nullptr) XXH3_freeState(xxh_);
  if (!dir_.empty()) {
    if (Status s = image::RemoveTree(dir_); !s.ok()) spdlog::warn("peer: cannot remove {}: {}", dir_, s.ToString());
  }
}

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
    // A new copy: ids increase, and the previous copy must be whole. Every
    // check comes before any change: a refused Add changes nothing.
    if (d.copy_id() < last_id_) {
      return Status::InvalidArgument("pre-copy copy id " + std::to_string(d.copy_id()) + " after " +
                                     std::to_string(last_id_) + " (ids must increase)");
    }
    if (last_id_ != 0) {
      const Copy& prev = by_id_.at(last_id_);
      if (prev.received != prev.where.bytes) {
        return Status::InvalidArgument("pre-copy copy " + std::to_string(last_id_) + " ended after " +
                                       std::to_string(prev.received) + " of " + std::to_string(prev.where.bytes) +
                                       " bytes");
      }
    }
    if (d.offset() != 0) {
      return Status::InvalidArgument("first chunk of pre-copy copy " + std::to_string(d.copy_id()) +
                                     " is not at offset 0");
    }
    if (d.bytes() == 0) return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + " is empty");
    // Checksums are required: they make a pre-copied extent as trustworthy
    // as streamed bytes (proto/peer.proto).
    const std::uint64_t cb = d.chunk_bytes();
    if (cb == 0 || static_cast<std::uint64_t>(d.chunk_xxh3_size()) != d.bytes() / cb + (d.bytes() % cb != 0)) {
      return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + " of " +
                                     std::to_string(d.bytes()) + " bytes carries " +
                                     std::to_string(d.chunk_xxh3_size()) + " checksums of " + std::to_string(cb) +
                                     "-byte chunks");
    }
    // A copy supersedes the one before it at the same address when it is
    // at least as long: it holds newer bytes of every chunk that one held,
    // so that one is never referenced again. (A shorter copy — the source
    // copies only the chunks written since — leaves the older copy's other
    // chunks referenced: both stay.) It goes over the superseded copy when
    // the size is the same, else at the end of the file.
    auto superseded = by_id_.end();
    if (auto it = by_address_.find(d.address()); it != by_address_.end()) {
      auto older = by_id_.find(it->second);
      if (older != by_id_.end() && older->second.where.bytes <= d.bytes()) superseded = older;
    }
    const bool in_place = superseded != by_id_.end() && superseded->second.where.bytes == d.bytes();
    const std::uint64_t slot = image::RoundUp(d.bytes(), image::kAlign);
    if (!in_place && (slot > max_bytes_ || end_ - image::kGpuImgHeaderBlock > max_bytes_ - slot)) {
      return Status::OutOfMemory("pre-copy '" + name_ + "' would grow to " +
                                 std::to_string(end_ - image::kGpuImgHeaderBlock + slot) +
                                 " bytes, over this daemon's limit of " + std::to_string(max_bytes_) +
                                 " (--max-receive-bytes)");
    }
    Copy c;
    c.where.address = d.address();
    c.where.bytes = d.bytes();
    c.where.file_offset = in_place ? superseded->second.where.file_offset : end_;
    c.chunk_bytes = cb;
    c.chunk_xxh3.assign(d.chunk_xxh3().begin(), d.chunk_xxh3().end());
    if (superseded != by_id_.end()) {
      held_bytes_ -= superseded->second.where.bytes;
      by_id_.erase(superseded);
    }
    if (!in_place) end_ += slot;
    held_bytes_ += d.bytes();
    by_id_.emplace(d.copy_id(), std::move(c));
    by_address_[d.address()] = d.copy_id();
    last_id_ = d.copy_id();
    XXH3_64bits_reset(xxh_);
  }
  Copy& c = by_id_.at(last_id_);
  if (d.bytes() != c.where.bytes || d.address() != c.where.address) {
    return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + " changed its address or size");
  }
  if (d.offset() != c.received || data.size() > c.where.bytes - c.received) {
    return Status::InvalidArgument("pre-copy copy " + std::to_string(d.copy_id()) + ": chunk at offset " +
                                   std::to_string(d.offset()) + " of " + std::to_string(data.size()) +
                                   " bytes, expected offset " + std::to_string(c.received) + " within " +
                                   std::to_string(c.where.bytes) + " bytes");
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = pwrite(fd_, data.data() + done, data.size() - done,
                             static_cast<off_t>(c.where.file_offset + c.received + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return image::ErrnoError("write", path_, errno);
    }
    done += static_cast<std::size_t>(n);
  }
  return HashLocked(c, data.data(), data.size());
}

Status PrecopyStore::HashLocked(Copy& c, const char* data, std::size_t n) {
  while (n > 0) {
    const std::uint64_t k = c.received / c.chunk_bytes;
    const std::uint64_t chunk_end = std::min(c.where.bytes, (k + 1) * c.chunk_bytes);
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, chunk_end - c.received));
    XXH3_64bits_update(xxh_, data, take);
    c.received += take;
    data += take;
    n -= take;
    if (c.received == chunk_end) {
      if (XXH3_64bits_digest(xxh_) != c.chunk_xxh3[k]) {
        return Status::Corruption("pre-copy copy " + std::to_string(last_id_) + " of buffer " +
                                  Hex(c.where.address) + ": chunk " + std::to_string(k) +
                                  " does not match its checksum (damaged in transit)");
      }
      XXH3_64bits_reset(xxh_);
    }
  }
  return Status::Ok();
}

Status PrecopyStore::Seal() {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' failed earlier");
  if (last_id_ != 0) {
    const Copy& c = by_id_.at(last_id_);
    if (c.received != c.where.bytes) {
      return Status::InvalidArgument("pre-copy '" + name_ + "' ended inside copy " + std::to_string(last_id_));
    }
  }
  sealed_ = true;
  return Status::Ok();
}

Status PrecopyStore::Lookup(std::uint64_t copy_id, Placement* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sealed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' has not ended yet");
  const auto it = by_id_.find(copy_id);
  if (it == by_id_.end()) {
    return Status::NotFound("pre-copy '" + name_ + "' holds no copy " + std::to_string(copy_id) +
                            " (never sent, or superseded by a newer copy of its buffer)");
  }
  *out = it->second.where;
  return Status::Ok();
}

Status PrecopyStore::TakeFile(std::string* path, std::uint64_t* end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sealed_) return Status::FailedPrecondition("pre-copy '" + name_ + "' has not ended yet");
  if (taken_) return Status::FailedPrecondition("pre-copy '" + name_ + "' was already claimed");
  taken_ = true;
  *path = path_;
  *end = end_;
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

}  // namespace phos::image
