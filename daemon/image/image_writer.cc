#include "image/image_writer.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>

#include "common/hex.h"
#include "common/version.h"
#include "image/commit_dir.h"
#include "image/file_util.h"
#include "image/manifest_file.h"
#include "image/retention.h"

namespace phos::image {
namespace {

std::uint64_t RandomImageId() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<std::uint64_t>(
             std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

Status ImageWriter::Open(const std::string& dir_in, const v1::Manifest& metadata,
                         const ImageWriterOptions& options, std::unique_ptr<ImageWriter>* out) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % kAlign != 0) {
    return Status::InvalidArgument("image chunk size " + std::to_string(options.chunk_bytes) +
                                   " must be a non-zero multiple of 4096");
  }
  if (!options.write_files && options.host_tier == nullptr) {
    return Status::InvalidArgument("an image written to no file needs a host tier");
  }
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::unique_ptr<ImageWriter> w(new ImageWriter);
  w->dir_ = dir;
  w->tmp_dir_ = dir + ".tmp";
  w->options_ = options;
  w->options_.io.buffer_bytes = options.chunk_bytes;
  w->manifest_ = metadata;
  w->manifest_.clear_buffers();
  if (w->options_.io.write_life_hint == 0) {
    w->options_.io.write_life_hint = WriteLifeHint(FromProto(metadata.keep()));
  }
  if (w->options_.host_tier_name.empty()) {
    w->options_.host_tier_name = std::filesystem::path(dir).filename().string();
  }
  if (options.write_files) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
      return Status::AlreadyExists(dir + " already exists; choose another checkpoint name");
    }
    if (::stat(w->tmp_dir_.c_str(), &st) == 0) {
      spdlog::info("image: removing incomplete checkpoint {} before writing it again", w->tmp_dir_);
      PHOS_RETURN_IF_ERROR(RemoveTree(w->tmp_dir_));
    }
    if (::mkdir(w->tmp_dir_.c_str(), 0755) != 0) {
      return ErrnoError("create directory", w->tmp_dir_, errno);
    }
    const std::string gpu_img = w->tmp_dir_ + "/" + std::string(kGpuImgName);
    IoBackendFactory factory = options.backend_factory ? options.backend_factory : OpenIoBackend;
    Status s = factory(gpu_img, IoMode::kWrite, w->options_.io, &w->io_);
    if (!s.ok()) {
      RemoveTree(w->tmp_dir_);
      w->state_ = State::kAborted;
      return s;
    }
  }
  *out = std::move(w);
  return Status::Ok();
}

ImageWriter::~ImageWriter() {
  if (state_ == State::kOpen) Abort();
}

std::string_view ImageWriter::io_backend_name() const {
  return io_ ? io_->name() : std::string_view("memory");
}

Status ImageWriter::AddBuffer(std::uint64_t addr, std::uint64_t bytes, std::size_t* index) {
  auto b = std::make_unique<BufferState>();
  b->addr = addr;
  b->bytes = bytes;
  const std::uint64_t chunks = ChunkCount(bytes, options_.chunk_bytes);
  b->xxh3.assign(chunks, 0);
  b->chunks.assign(chunks, ChunkState::kEmpty);
  if (options_.host_tier) b->host_copy.resize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kOpen) return Status::FailedPrecondition("image writer is closed");
  b->extent_offset = next_offset_;
  next_offset_ += RoundUp(bytes, kAlign);
  *index = buffers_.size();
  buffers_.push_back(std::move(b));
  return Status::Ok();
}

Status ImageWriter::FailChunk(BufferState* b, std::uint64_t chunk, Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  b->chunks[chunk] = ChunkState::kEmpty;
  return s;
}

Status ImageWriter::Write(std::size_t buffer, std::uint64_t offset, const void* data,
                          std::size_t len) {
  BufferState* b = nullptr;
  std::uint64_t chunk = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kOpen) return Status::FailedPrecondition("image writer is closed");
    if (buffer >= buffers_.size()) {
      return Status::InvalidArgument("image has no buffer " + std::to_string(buffer));
    }
    b = buffers_[buffer].get();
    const std::uint64_t cb = options_.chunk_bytes;
    if (offset % cb != 0 || offset >= b->bytes ||
        len != std::min<std::uint64_t>(cb, b->bytes - offset)) {
      return Status::InvalidArgument(
          "write to buffer " + Hex(b->addr) + " at offset " + std::to_string(offset) + " of " +
          std::to_string(len) + " bytes is not one whole chunk (chunk size " + std::to_string(cb) +
          ", buffer " + std::to_string(b->bytes) + " bytes)");
    }
    chunk = offset / cb;
    if (b->chunks[chunk] != ChunkState::kEmpty) {
      return Status::InvalidArgument("chunk " + std::to_string(chunk) + " of buffer " +
                                     Hex(b->addr) + " written twice");
    }
    b->chunks[chunk] = ChunkState::kWriting;
  }
  // No lock from here: this chunk is ours (kWriting), b is stable.
  const std::uint64_t sum = Xxh3(data, len);
  if (!b->host_copy.empty()) std::memcpy(b->host_copy.data() + offset, data, len);
  if (io_) {
    IoBuffer* staging = nullptr;
    Status s = io_->Acquire(&staging);
    if (!s.ok()) return FailChunk(b, chunk, s);
    const std::size_t padded = RoundUp(len, kAlign);
    std::memcpy(staging->data, data, len);
    std::memset(staging->data + len, 0, padded - len);
    s = io_->WriteAsync(staging, b->extent_offset + offset, padded);
    if (!s.ok()) return FailChunk(b, chunk, s);
  }
  std::lock_guard<std::mutex> lock(mu_);
  b->xxh3[chunk] = sum;
  b->chunks[chunk] = ChunkState::kDone;
  return Status::Ok();
}

Status ImageWriter::WriteBuffer(std::size_t buffer, const void* data) {
  std::uint64_t bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (buffer >= buffers_.size()) {
      return Status::InvalidArgument("image has no buffer " + std::to_string(buffer));
    }
    bytes = buffers_[buffer]->bytes;
  }
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::uint64_t off = 0; off < bytes; off += options_.chunk_bytes) {
    PHOS_RETURN_IF_ERROR(
        Write(buffer, off, p + off, std::min<std::uint64_t>(options_.chunk_bytes, bytes - off)));
  }
  return Status::Ok();
}

Status ImageWriter::WriteElsewhere(std::size_t buffer, std::size_t first_chunk,
                                   const std::vector<std::uint64_t>& chunk_xxh3) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kOpen) return Status::FailedPrecondition("image writer is closed");
  if (buffer >= buffers_.size()) return Status::InvalidArgument("image has no buffer " + std::to_string(buffer));
  if (options_.host_tier) {
    return Status::InvalidArgument("an image kept in the host tier cannot leave buffer bytes to someone else");
  }
  BufferState* b = buffers_[buffer].get();
  if (first_chunk > b->chunks.size() || chunk_xxh3.size() > b->chunks.size() - first_chunk) {
    return Status::InvalidArgument("buffer " + Hex(b->addr) + " has " + std::to_string(b->chunks.size()) +
                                   " chunks, not chunks " + std::to_string(first_chunk) + " to " +
                                   std::to_string(first_chunk + chunk_xxh3.size() - 1));
  }
  for (std::size_t c = first_chunk; c < first_chunk + chunk_xxh3.size(); ++c) {
    if (b->chunks[c] != ChunkState::kEmpty) {
      return Status::InvalidArgument("chunk " + std::to_string(c) + " of buffer " + Hex(b->addr) + " written twice");
    }
  }
  for (std::size_t k = 0; k < chunk_xxh3.size(); ++k) {
    b->xxh3[first_chunk + k] = chunk_xxh3[k];
    b->chunks[first_chunk + k] = ChunkState::kDone;
  }
  return Status::Ok();
}

Status ImageWriter::Commit() {
  std::shared_ptr<HostImage> host;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kOpen) return Status::FailedPrecondition("image writer is closed");
    for (const auto& b : buffers_) {
      for (std::size_t c = 0; c < b->chunks.size(); ++c) {
        if (b->chunks[c] != ChunkState::kDone) {
          return Status::FailedPrecondition(
              "cannot commit " + dir_ + ": chunk " + std::to_string(c) + " of buffer " +
              Hex(b->addr) + " was " +
              (b->chunks[c] == ChunkState::kEmpty ? "never written" : "still being written"));
        }
      }
    }
    manifest_.set_format_version(kImageFormatVersion);
    manifest_.set_phos_version(VersionString());
    manifest_.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
    manifest_.set_image_id(RandomImageId());
    manifest_.set_gpu_img_bytes(next_offset_);
    if (options_.host_tier) host = std::make_shared<HostImage>();
    for (auto& b : buffers_) {
      v1::BufferExtent* e = manifest_.add_buffers();
      e->set_device_address(b->addr);
      e->set_bytes(b->bytes);
      e->set_extent_offset(b->extent_offset);
      e->set_chunk_bytes(options_.chunk_bytes);
      for (std::uint64_t x : b->xxh3) e->add_chunk_xxh3(x);
      if (host) host->buffers.push_back(std::move(b->host_copy));
    }
    state_ = State::kCommitted;  // no more writes; failures below abort
  }
  auto fail = [this](Status s) {
    io_.reset();
    RemoveTree(tmp_dir_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_ = State::kAborted;
    }
    spdlog::warn("image: checkpoint {} not committed: {}", dir_, s.ToString());
    return s;
  };
  if (io_) {
    IoBuffer* hb = nullptr;
    Status s = io_->Acquire(&hb);
    if (!s.ok()) return fail(s);
    std::memset(hb->data, 0, kGpuImgHeaderBlock);
    GpuImgHeader gh;
    gh.image_id = manifest_.image_id();
    gh.file_bytes = manifest_.gpu_img_bytes();
    EncodeGpuImgHeader(gh, hb->data);
    s = io_->WriteAsync(hb, 0, kGpuImgHeaderBlock);
    if (s.ok()) s = io_->Drain();
    if (s.ok()) s = io_->Truncate(manifest_.gpu_img_bytes());
    if (s.ok() && options_.durable) s = io_->Sync();
    if (!s.ok()) return fail(s);
    io_.reset();  // closes gpu.img

    std::string bytes;
    s = EncodeManifestFile(manifest_, &bytes);
    if (s.ok()) {
      s = WriteFileDurable(tmp_dir_ + "/" + std::string(kManifestName), bytes,
                           options_.io.write_life_hint);
    }
    bool visible = false;
    if (s.ok()) {
      s = CommitDirectory(tmp_dir_, dir_, options_.durable ? CommitSync::kDirectory : CommitSync::kNone,
                          CommitReplace::kNever, &visible);
    }
    if (!visible) return fail(s);
    if (!s.ok()) {
      // The image is complete and in place; only its durability is unknown.
      spdlog::warn("image: {} committed but its directory could not be synced: {}", dir_,
                   s.ToString());
    }
  }
  if (host) {
    host->manifest = manifest_;
    std::vector<std::string> evicted;
    Status s = options_.host_tier->Put(options_.host_tier_name, std::move(host), &evicted);
    for (const std::string& name : evicted) {
      spdlog::info("image: host tier evicted {} to make room for {}", name,
                   options_.host_tier_name);
    }
    if (!s.ok()) {
      if (!options_.write_files) return s;
      spdlog::warn("image: {} is on disk but not in the host tier: {}", dir_, s.ToString());
    }
  }
  return Status::Ok();
}

void ImageWriter::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kAborted) return;
    if (state_ == State::kCommitted) return;  // nothing to undo
    state_ = State::kAborted;
  }
  if (io_) {
    io_->Drain();  // queued writes must finish before their buffers go away
    io_.reset();
  }
  if (options_.write_files) {
    Status s = RemoveTree(tmp_dir_);
    if (!s.ok()) spdlog::warn("image: could not remove {}: {}", tmp_dir_, s.ToString());
  }
}

}  // namespace phos::image
