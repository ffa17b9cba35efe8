#include "image/image_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/hex.h"
#include "image/file_util.h"
#include "image/image_layout.h"
#include "image/manifest_file.h"

namespace phos::image {
namespace {

std::string Who(const v1::BufferExtent& e, std::size_t i) {
  return "buffer " + std::to_string(i) + " (" + Hex(e.device_address()) + ")";
}

/// Bytes of chunk `c` of `e` (the last one may be short).
std::size_t ChunkLen(const v1::BufferExtent& e, std::uint64_t c) {
  return static_cast<std::size_t>(std::min<std::uint64_t>(e.chunk_bytes(), e.bytes() - c * e.chunk_bytes()));
}

}  // namespace

Status ReadManifest(const std::string& dir, v1::Manifest* m) {
  const std::string path = dir + "/" + std::string(kManifestName);
  std::string bytes;
  Status s = ReadSmallFile(path, kManifestHeaderBytes + kMaxManifestBytes, &bytes);
  if (s.code() == Status::Code::kNotFound) {
    return Status::NotFound(dir + " is not a phos image: it has no manifest (an incomplete "
                            "or interrupted checkpoint?)");
  }
  PHOS_RETURN_IF_ERROR(s);
  return DecodeManifestFile({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, m)
      .WithContext(path);
}

Status ImageReader::Open(const std::string& dir, const ImageReaderOptions& options,
                         std::unique_ptr<ImageReader>* out) {
  std::unique_ptr<ImageReader> r(new ImageReader);
  r->dir_ = dir;
  PHOS_RETURN_IF_ERROR(ReadManifest(dir, &r->manifest_));
  const v1::Manifest& m = r->manifest_;
  const std::string path = dir + "/" + std::string(kGpuImgName);

  // Size first: a truncated gpu.img is named by what it lost.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Status::Corruption(path + " is missing (the manifest needs it)");
    return ErrnoError("stat", path, err);
  }
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (size < m.gpu_img_bytes()) {
    std::string what = path + " is truncated: " + std::to_string(size) +
                       " bytes, the manifest says " + std::to_string(m.gpu_img_bytes());
    for (int i = 0; i < m.buffers_size(); ++i) {
      const v1::BufferExtent& e = m.buffers(i);
      for (int c = 0; c < e.chunk_xxh3_size(); ++c) {
        const std::uint64_t off = e.extent_offset() + static_cast<std::uint64_t>(c) * e.chunk_bytes();
        if (off + ChunkLen(e, static_cast<std::uint64_t>(c)) > size) {
          what += "; first damaged: " + Who(e, static_cast<std::size_t>(i)) + ", chunk " +
                  std::to_string(c) + " at file offset " + std::to_string(off);
          return Status::Corruption(what);
        }
      }
    }
    return Status::Corruption(what);
  }
  if (size > m.gpu_img_bytes()) {
    return Status::Corruption(path + " is " + std::to_string(size) + " bytes, the manifest says " +
                              std::to_string(m.gpu_img_bytes()) + " (wrong gpu.img for this manifest?)");
  }

  // The header is small metadata: read it buffered.
  {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open", path, errno);
    std::uint8_t hdr[kGpuImgHeaderBytes];
    ssize_t n = ::pread(fd, hdr, sizeof hdr, 0);
    const int err = errno;
    ::close(fd);
    if (n < 0) return ErrnoError("read", path, err);
    GpuImgHeader gh;
    PHOS_RETURN_IF_ERROR(
        DecodeGpuImgHeader({hdr, static_cast<std::size_t>(n)}, &gh).WithContext(path));
    if (gh.image_id != m.image_id() || gh.file_bytes != m.gpu_img_bytes()) {
      return Status::Corruption(path + " does not belong to this manifest (image id " +
                                Hex(gh.image_id) + ", manifest says " + Hex(m.image_id()) + ")");
    }
  }

  std::uint64_t max_chunk = kAlign;
  for (const v1::BufferExtent& e : m.buffers()) {
    if (e.bytes() > 0) max_chunk = std::max(max_chunk, std::min(e.chunk_bytes(), RoundUp(e.bytes(), kAlign)));
  }
  IoOptions io = options.io;
  io.buffer_bytes = max_chunk;
  IoBackendFactory factory = options.backend_factory ? options.backend_factory : OpenIoBackend;
  PHOS_RETURN_IF_ERROR(factory(path, IoMode::kRead, io, &r->io_));
  r->queue_depth_ = std::max<std::size_t>(io.pool ? io.pool->count() : io.queue_depth, 1);
  *out = std::move(r);
  return Status::Ok();
}

Status ImageReader::CheckChunk(std::size_t buffer, std::uint64_t chunk, const std::uint8_t* data,
                               std::size_t got) const {
  const v1::BufferExtent& e = manifest_.buffers(static_cast<int>(buffer));
  const std::size_t n = ChunkLen(e, chunk);
  const std::uint64_t file_off = e.extent_offset() + chunk * e.chunk_bytes();
  if (got < n) {
    return Status::Corruption("gpu.img is truncated: " + Who(e, buffer) + ", chunk " +
                              std::to_string(chunk) + " at file offset " + std::to_string(file_off) +
                              " has only " + std::to_string(got) + " of " + std::to_string(n) +
                              " bytes");
  }
  if (Xxh3(data, n) != e.chunk_xxh3(static_cast<int>(chunk))) {
    return Status::Corruption("checksum mismatch in " + dir_ + "/gpu.img: " + Who(e, buffer) +
                              ", chunk " + std::to_string(chunk) + " at file offset " +
                              std::to_string(file_off) + " (" + std::to_string(n) +
                              " bytes); the image is corrupt and must not be restored");
  }
  return Status::Ok();
}

ImageReader::PendingChunks::~PendingChunks() {
  reads_.reset();  // waits for the reads still in flight
  if (reader_ != nullptr) {
    for (const auto& op : ops_) reader_->io_->Release(op.buf);
  }
}

Status ImageReader::StartStaged(std::size_t buffer, std::uint64_t first, std::uint64_t end, std::size_t max,
                                bool wait, std::unique_ptr<PendingChunks>* out) {
  out->reset();
  if (buffer >= buffer_count()) {
    return Status::InvalidArgument("image has no buffer " + std::to_string(buffer));
  }
  const v1::BufferExtent& e = manifest_.buffers(static_cast<int>(buffer));
  end = std::min<std::uint64_t>(end, static_cast<std::uint64_t>(e.chunk_xxh3_size()));
  if (first >= end || max == 0) return Status::Ok();
  // One buffer (blocking when `wait`), more only if free: concurrent
  // readers never deadlock holding part of the pool each.
  IoBuffer* b = nullptr;
  if (wait) {
    PHOS_RETURN_IF_ERROR(io_->Acquire(&b));
  } else if ((b = io_->TryAcquire()) == nullptr) {
    return Status::Ok();
  }
  auto p = std::make_unique<PendingChunks>();
  p->reader_ = this;
  p->buffer_ = buffer;
  p->first_ = first;
  do {
    const std::uint64_t c = first + p->ops_.size();
    p->ops_.push_back({b, e.extent_offset() + c * e.chunk_bytes(), RoundUp(ChunkLen(e, c), kAlign), 0});
  } while (p->ops_.size() < max && first + p->ops_.size() < end && (b = io_->TryAcquire()) != nullptr);
  PHOS_RETURN_IF_ERROR(io_->StartReads(p->ops_, &p->reads_));  // p releases the buffers
  *out = std::move(p);
  return Status::Ok();
}

Status ImageReader::PendingChunks::Wait() {
  if (reads_ != nullptr) {
    read_status_ = reads_->Wait();
    reads_.reset();
  }
  return read_status_;
}

Status ImageReader::FinishStaged(std::unique_ptr<PendingChunks> p, std::vector<StagedChunk>* out) {
  if (p == nullptr) return Status::Ok();
  Status s = p->Wait();
  const v1::BufferExtent& e = manifest_.buffers(static_cast<int>(p->buffer_));
  for (std::size_t i = 0; i < p->ops_.size() && s.ok(); ++i) {
    s = CheckChunk(p->buffer_, p->first_ + i, p->ops_[i].buf->data, p->ops_[i].got);
  }
  if (!s.ok()) return s;  // p releases the buffers
  for (std::size_t i = 0; i < p->ops_.size(); ++i) {
    const std::uint64_t c = p->first_ + i;
    out->push_back({p->ops_[i].buf, c, p->ops_[i].buf->data, ChunkLen(e, c)});
  }
  p->ops_.clear();  // handed out: the caller releases them
  return Status::Ok();
}

Status ImageReader::ReadStaged(std::size_t buffer, std::uint64_t first, std::uint64_t end, std::size_t max,
                               bool wait, std::vector<StagedChunk>* out) {
  std::unique_ptr<PendingChunks> p;
  PHOS_RETURN_IF_ERROR(StartStaged(buffer, first, end, max, wait, &p));
  return FinishStaged(std::move(p), out);
}

Status ImageReader::ReadChunks(
    std::size_t buffer, std::uint64_t first, std::uint64_t end,
    const std::function<void(std::uint64_t, const std::uint8_t*, std::size_t)>& sink) {
  std::vector<StagedChunk> staged;
  for (std::uint64_t c = first; c < end;) {
    staged.clear();
    PHOS_RETURN_IF_ERROR(ReadStaged(buffer, c, end, queue_depth_, true, &staged));
    if (staged.empty()) return Status::Internal("image reader: no chunk read at " + std::to_string(c));
    for (const StagedChunk& sc : staged) {
      sink(sc.chunk, sc.data, sc.len);
      Release(sc);
    }
    c += staged.size();
  }
  return Status::Ok();
}

Status ImageReader::ReadBuffer(std::size_t buffer, void* dst) {
  if (buffer >= buffer_count()) {
    return Status::InvalidArgument("image has no buffer " + std::to_string(buffer));
  }
  const v1::BufferExtent& e = manifest_.buffers(static_cast<int>(buffer));
  auto* p = static_cast<std::uint8_t*>(dst);
  return ReadChunks(buffer, 0, static_cast<std::uint64_t>(e.chunk_xxh3_size()),
                    [&](std::uint64_t c, const std::uint8_t* data, std::size_t len) {
                      std::memcpy(p + c * e.chunk_bytes(), data, len);
                    });
}

Status ImageReader::VerifyAll(const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::uint64_t total = 0, done = 0;
  for (const v1::BufferExtent& e : manifest_.buffers()) total += e.bytes();
  for (std::size_t i = 0; i < buffer_count(); ++i) {
    const v1::BufferExtent& e = manifest_.buffers(static_cast<int>(i));
    PHOS_RETURN_IF_ERROR(ReadChunks(i, 0, static_cast<std::uint64_t>(e.chunk_xxh3_size()),
                                    [&](std::uint64_t, const std::uint8_t*, std::size_t len) {
                                      done += len;
                                      if (progress) progress(done, total);
                                    }));
  }
  return Status::Ok();
}

}  // namespace phos::image
