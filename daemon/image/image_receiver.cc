#include "image/image_receiver.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

#include "common/hex.h"
#include "common/xxh3.h"
#include "image/commit_dir.h"
#include "image/file_util.h"
#include "image/image_layout.h"
#include "image/manifest_file.h"

namespace phos::image {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Status MkdirIfMissing(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0) return Status::Ok();
  if (errno != EEXIST) return image::ErrnoError("mkdir", path, errno);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(path + " exists and is not a directory");
  }
  return Status::Ok();
}

}  // namespace

std::string CheckImageName(std::string_view name) {
  if (name.empty()) return "the image name is empty";
  if (name.size() > 200) return "the image name is longer than 200 characters";
  if (name == "." || name == "..") return "the image name may not be '.' or '..'";
  if (EndsWith(name, ".tmp")) return "the image name may not end in .tmp (reserved for incomplete transfers)";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return "the image name may only hold letters, digits, '.', '_' and '-'";
  }
  return "";
}

std::string CheckRelativePath(std::string_view path) {
  if (path.empty()) return "empty file path";
  if (path.size() > 4096) return "file path longer than 4096 bytes";
  if (path.front() == '/') return "absolute file path";
  if (path.find('\0') != std::string_view::npos) return "NUL in file path";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    const std::string_view comp = path.substr(start, slash - start);
    if (comp.empty()) return "empty component in file path";
    if (comp == "." || comp == "..") return "'.' or '..' in file path";
    if (comp.size() > 255) return "file path component longer than 255 bytes";
    start = slash + 1;
  }
  return "";
}

Status ImageReceiver::Begin(const ImageReceiverOptions& options, const peer::v1::ImageBegin& begin,
                            std::unique_ptr<ImageReceiver>* out) {
  if (std::string why = CheckImageName(begin.name()); !why.empty()) {
    return Status::InvalidArgument(why + " ('" + begin.name() + "')");
  }
  if (begin.total_bytes() > options.max_bytes) {
    return Status::OutOfMemory("image '" + begin.name() + "' is " + std::to_string(begin.total_bytes()) +
                               " bytes, over this daemon's limit of " + std::to_string(options.max_bytes) +
                               " (--max-receive-bytes)");
  }
  std::unique_ptr<ImageReceiver> r(new ImageReceiver());
  r->options_ = options;
  r->name_ = begin.name();
  r->announced_bytes_ = begin.total_bytes();
  r->skip_fsync_ = begin.skip_fsync();
  r->final_dir_ = options.incoming_dir + "/" + begin.name();
  r->tmp_dir_ = r->final_dir_ + ".tmp";
  // The parent (checkpoint root) may not exist yet on a fresh daemon.
  const std::string root = options.incoming_dir.substr(0, options.incoming_dir.rfind('/'));
  if (!root.empty()) {
    if (mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) return image::ErrnoError("mkdir", root, errno);
  }
  PHOS_RETURN_IF_ERROR(MkdirIfMissing(options.incoming_dir));
  struct stat st {};
  if (lstat(r->final_dir_.c_str(), &st) == 0) {
    return Status::AlreadyExists(r->final_dir_ + " already exists on the destination; send under another --name");
  }
  // No transfer of this name is in flight (the caller's guarantee), so a
  // .tmp here is a dead source's leftover.
  if (lstat(r->tmp_dir_.c_str(), &st) == 0) {
    spdlog::info("peer: replacing incomplete transfer {}", r->tmp_dir_);
    PHOS_RETURN_IF_ERROR(image::RemoveTree(r->tmp_dir_));
  }
  if (mkdir(r->tmp_dir_.c_str(), 0700) != 0) return image::ErrnoError("mkdir", r->tmp_dir_, errno);
  r->xxh_ = XXH3_createState();
  if (r->xxh_ == nullptr) return Status::OutOfMemory("XXH3_createState");
  *out = std::move(r);
  return Status::Ok();
}

ImageReceiver::~ImageReceiver() {
  CloseFile();
  if (xxh_ != nullptr) XXH3_freeState(xxh_);
}

void ImageReceiver::CloseFile() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  file_rel_.clear();
  file_bytes_ = 0;
}

Status ImageReceiver::OpenFile(const std::string& rel) {
  if (std::string why = CheckRelativePath(rel); !why.empty()) {
    return Status::InvalidArgument(why + ": '" + rel + "' (paths must stay inside the image)");
  }
  // Parent directories, one component at a time: each is created by us
  // inside the fresh .tmp, so none can be a symlink planted elsewhere.
  for (std::size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    const std::string dir = tmp_dir_ + "/" + rel.substr(0, slash);
    PHOS_RETURN_IF_ERROR(MkdirIfMissing(dir));
  }
  const std::string path = tmp_dir_ + "/" + rel;
  if (rel == image::kGpuImgName && options_.precopy) {
    // The pre-copy's file already holds the copies: it becomes gpu.img.
    std::string precopied;
    PHOS_RETURN_IF_ERROR(options_.precopy->TakeFile(&precopied, &gpu_end_));
    if (renameat2(AT_FDCWD, precopied.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) return Status::InvalidArgument("file '" + rel + "' sent twice");
      return image::ErrnoError("move the pre-copy " + precopied + " to", path, errno);
    }
    relayout_ = true;
    fd_ = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  } else {
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd_ < 0) {
    if (errno == EEXIST) return Status::InvalidArgument("file '" + rel + "' sent twice");
    return image::ErrnoError("create", path, errno);
  }
  file_rel_ = rel;
  file_bytes_ = 0;
  XXH3_64bits_reset(xxh_);
  return Status::Ok();
}

Status ImageReceiver::Data(const peer::v1::FileData& data) {
  if (finished_) return Status::FailedPrecondition("data after the end of the image");
  if (fd_ >= 0 && data.path() != file_rel_) {
    return Status::InvalidArgument("data for '" + data.path() + "' before the end of '" + file_rel_ + "'");
  }
  if (fd_ < 0) {
    if (data.offset() != 0) return Status::InvalidArgument("first chunk of '" + data.path() + "' is not at offset 0");
    PHOS_RETURN_IF_ERROR(OpenFile(data.path()));
  }
  if (data.offset() != file_bytes_) {
    return Status::InvalidArgument("chunk of '" + file_rel_ + "' at offset " + std::to_string(data.offset()) +
                                   ", expected " + std::to_string(file_bytes_) + " (chunks must be contiguous)");
  }
  const char* bytes = data.data().data();
  std::size_t size = data.data().size();
  const bool laying_out = relayout_ && file_rel_ == image::kGpuImgName;  // gpu.img around a pre-copy
  if (data.has_ref()) {
    if (size != 0) return Status::InvalidArgument("a chunk of '" + file_rel_ + "' carries both bytes and a pre-copy reference");
    if (!options_.precopy) {
      return Status::FailedPrecondition("a chunk of '" + file_rel_ + "' refers to a pre-copy, but no pre-copy of '" +
                                        name_ + "' was received (or it expired)");
    }
    if (!laying_out) return Status::InvalidArgument("pre-copy references are only for gpu.img, not '" + file_rel_ + "'");
    size = static_cast<std::size_t>(data.ref().length());
  }
  const std::uint64_t limit = std::min(announced_bytes_, options_.max_bytes);
  if (total_bytes_ + size > limit) {
    return Status::OutOfMemory("image '" + name_ + "' exceeds " + std::to_string(limit) + " bytes (" +
                               (limit == announced_bytes_ ? "its announced size" : "--max-receive-bytes") + ")");
  }
  // FileEnd's xxh3 covers the bytes the stream carried; pre-copied parts
  // were checked on arrival (PrecopyStore) against the manifest's values.
  if (!data.has_ref()) XXH3_64bits_update(xxh_, bytes, size);
  if (laying_out) {
    PHOS_RETURN_IF_ERROR(PlaceGpuImgChunk(data, bytes, size));
  } else {
    PHOS_RETURN_IF_ERROR(WriteAt(bytes, size, file_bytes_));
  }
  // Start writeback of every completed 64 MiB now (no waiting), so the
  // fsync at FileEnd finds little left to write — the disk works while the
  // network delivers instead of after. Not for an image nobody fsyncs.
  constexpr std::uint64_t kWritebackStep = 64ull << 20;
  const std::uint64_t before = file_bytes_ / kWritebackStep;
  file_bytes_ += size;
  total_bytes_ += size;
  if (!skip_fsync_ && !laying_out && file_bytes_ / kWritebackStep != before) {
    const std::uint64_t end = (file_bytes_ / kWritebackStep) * kWritebackStep;
    (void)sync_file_range(fd_, static_cast<off_t>(end - kWritebackStep), static_cast<off_t>(kWritebackStep),
                          SYNC_FILE_RANGE_WRITE);
  }
  return Status::Ok();
}

Status ImageReceiver::WriteAt(const char* bytes, std::size_t n, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = pwrite(fd_, bytes + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return image::ErrnoError("write", tmp_dir_ + "/" + file_rel_, errno);
    }
    done += static_cast<std::size_t>(w);
  }
  return Status::Ok();
}

Status ImageReceiver::PlaceGpuImgChunk(const peer::v1::FileData& data, const char* bytes, std::size_t size) {
  const std::uint64_t src = data.offset();
  if (data.has_ref()) {
    PrecopyStore::Placement where;
    PHOS_RETURN_IF_ERROR(options_.precopy->Lookup(data.ref().copy_id(), &where)
                             .WithContext("'" + file_rel_ + "' at offset " + std::to_string(src)));
    const peer::v1::PrecopyRef& ref = data.ref();
    if (ref.length() == 0 || ref.copy_offset() > where.bytes || ref.length() > where.bytes - ref.copy_offset()) {
      return Status::InvalidArgument("pre-copy reference [" + std::to_string(ref.copy_offset()) + ", +" +
                                     std::to_string(ref.length()) + ") is outside copy " +
                                     std::to_string(ref.copy_id()) + " of buffer " + Hex(where.address) + " (" +
                                     std::to_string(where.bytes) + " bytes)");
    }
    spans_.push_back(Span{src, ref.length(), where.file_offset + ref.copy_offset(), where.address, where.bytes,
                          where.file_offset});
    inline_run_ = false;
    return Status::Ok();
  }
  if (!inline_run_) {
    // A new run of streamed bytes, placed after everything so far at the
    // same offset modulo 4 KiB as in the source's file.
    const std::uint64_t base = image::RoundUp(gpu_end_, image::kAlign);
    spans_.push_back(Span{src, 0, base + src % image::kAlign});
    inline_run_ = true;
  }
  Span& run = spans_.back();
  const std::uint64_t dst = run.dst + run.len;
  PHOS_RETURN_IF_ERROR(WriteAt(bytes, size, dst));
  run.len += size;
  gpu_end_ = std::max(gpu_end_, dst + size);
  return Status::Ok();
}

namespace {
/// Copies `len` bytes of `fd` from offset `from` to offset `to` (ranges
/// that do not overlap), in the kernel (copy_file_range: no bounce buffer).
Status CopyWithin(int fd, std::uint64_t from, std::uint64_t to, std::uint64_t len, const std::string& path) {
  auto in = static_cast<off_t>(from), out = static_cast<off_t>(to);
  for (std::uint64_t done = 0; done < len;) {
    const ssize_t n = copy_file_range(fd, &in, fd, &out, static_cast<std::size_t>(len - done), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return image::ErrnoError("copy within", path, n < 0 ? errno : EIO);  // 0: past the end
    done += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}
}  // namespace

Status ImageReceiver::PlaceExtent(int fd, image::v1::BufferExtent* b, std::uint64_t* file_end) {
  // The spans covering [off, off + bytes) of the source's gpu.img, in order,
  // each as a piece: [at, +len) of the extent lies at `dst` in our file.
  struct Piece {
    std::uint64_t at, len, dst;
    const Span* span;
  };
  const std::uint64_t off = b->extent_offset(), bytes = b->bytes();
  std::vector<Piece> pieces;
  auto it = std::upper_bound(spans_.begin(), spans_.end(), off,
                             [](std::uint64_t v, const Span& sp) { return v < sp.src; });
  if (it != spans_.begin()) --it;
  for (std::uint64_t at = 0; at < bytes; ++it) {
    if (it == spans_.end() || it->src > off + at || it->src + it->len <= off + at) {
      return Status::Corruption("buffer " + Hex(b->device_address()) + "'s extent [" + std::to_string(off) + ", +" +
                                std::to_string(bytes) + ") of gpu.img was not received whole (nothing at +" +
                                std::to_string(at) + ")");
    }
    const std::uint64_t in_span = off + at - it->src;
    const std::uint64_t len = std::min(it->len - in_span, bytes - at);
    pieces.push_back(Piece{at, len, it->dst + in_span, &*it});
    at += len;
  }
  // Where the extent goes: where its first piece puts it when every piece
  // is already in line; else over the buffer's whole copy; else at the end.
  std::uint64_t home = pieces.front().dst;
  const bool in_line = std::all_of(pieces.begin(), pieces.end(), [&](const Piece& p) { return p.dst == home + p.at; });
  if (!in_line) {
    home = 0;
    for (const Piece& p : pieces) {
      if (p.span->copy_bytes == bytes && p.span->copy_address == b->device_address()) home = p.span->copy_file_offset;
    }
    if (home == 0) {
      // Bounded like the image itself: a manifest naming many overlapping
      // extents must not grow the file without end.
      assembled_bytes_ += image::RoundUp(bytes, image::kAlign);
      if (assembled_bytes_ > options_.max_bytes) {
        return Status::OutOfMemory("image '" + name_ + "': assembling buffer " + Hex(b->device_address()) +
                                   " would take " + std::to_string(assembled_bytes_) +
                                   " bytes of extents assembled anew, over this daemon's limit of " +
                                   std::to_string(options_.max_bytes) + " (--max-receive-bytes)");
      }
      home = image::RoundUp(*file_end, image::kAlign);
      *file_end = home + image::RoundUp(bytes, image::kAlign);
    }
    // A whole copy's slot holds only this buffer's bytes, and the pieces
    // copied over it replace chunks the source superseded: nothing else
    // refers to them.
    const std::string path = tmp_dir_ + "/" + std::string(image::kGpuImgName);
    for (const Piece& p : pieces) {
      if (p.dst != home + p.at) PHOS_RETURN_IF_ERROR(CopyWithin(fd, p.dst, home + p.at, p.len, path));
    }
  }
  if (home % image::kAlign != 0) {
    return Status::Internal("buffer " + Hex(b->device_address()) + " would start at unaligned offset " +
                            std::to_string(home));
  }
  b->set_extent_offset(home);
  return Status::Ok();
}

Status ImageReceiver::LayOutGpuImg() {
  const std::string manifest_path = tmp_dir_ + "/" + std::string(image::kManifestName);
  std::string bytes;
  PHOS_RETURN_IF_ERROR(image::ReadSmallFile(manifest_path, 64ull << 20, &bytes)
                           .WithContext("an image with pre-copied extents needs its manifest"));
  image::v1::Manifest m;
  PHOS_RETURN_IF_ERROR(image::DecodeManifestFile(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), &m));
  const std::string gpu_path = tmp_dir_ + "/" + std::string(image::kGpuImgName);
  const int fd = open(gpu_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return image::ErrnoError("open", gpu_path, errno);
  std::uint64_t file_end = gpu_end_;
  for (const Span& sp : spans_) file_end = std::max(file_end, sp.dst + sp.len);
  Status s;
  for (auto& b : *m.mutable_buffers()) {
    if (b.bytes() == 0) continue;
    s = PlaceExtent(fd, &b, &file_end);
    if (!s.ok()) break;
  }
  if (s.ok()) {
    for (const auto& b : m.buffers()) {
      file_end = std::max(file_end, b.extent_offset() + image::RoundUp(b.bytes(), image::kAlign));
    }
    m.set_gpu_img_bytes(image::RoundUp(file_end, image::kAlign));
    std::uint8_t block[image::kGpuImgHeaderBlock] = {};
    image::GpuImgHeader h;
    h.image_id = m.image_id();
    h.file_bytes = m.gpu_img_bytes();
    image::EncodeGpuImgHeader(h, block);
    if (pwrite(fd, block, sizeof(block), 0) != static_cast<ssize_t>(sizeof(block))) {
      s = image::ErrnoError("write the header of", gpu_path, errno);
    } else if (ftruncate(fd, static_cast<off_t>(m.gpu_img_bytes())) != 0) {
      s = image::ErrnoError("truncate", gpu_path, errno);
    } else if (!skip_fsync_ && fsync(fd) != 0) {
      s = image::ErrnoError("fsync", gpu_path, errno);
    }
  }
  close(fd);
  PHOS_RETURN_IF_ERROR(s);
  std::string encoded;
  PHOS_RETURN_IF_ERROR(image::EncodeManifestFile(m, &encoded));
  return image::WriteFileDurable(manifest_path, encoded, 0);
}

Status ImageReceiver::FileEnd(const peer::v1::FileEnd& end) {
  if (finished_) return Status::FailedPrecondition("file end after the end of the image");
  if (fd_ < 0) {
    PHOS_RETURN_IF_ERROR(OpenFile(end.path()));  // an empty file: no data chunks
  } else if (end.path() != file_rel_) {
    return Status::InvalidArgument("end of '" + end.path() + "' while receiving '" + file_rel_ + "'");
  }
  if (end.size() != file_bytes_) {
    return Status::Corruption("'" + file_rel_ + "': source says " + std::to_string(end.size()) + " bytes, received " +
                              std::to_string(file_bytes_));
  }
  const std::uint64_t got = XXH3_64bits_digest(xxh_);
  if (got != end.xxh3()) {
    return Status::Corruption("'" + file_rel_ + "': xxh3 mismatch (received data is damaged)");
  }
  const mode_t mode = end.mode() == 0 ? 0600 : static_cast<mode_t>(end.mode() & 0777);
  if (fchmod(fd_, mode) != 0) return image::ErrnoError("chmod", tmp_dir_ + "/" + file_rel_, errno);
  if (!skip_fsync_ && fsync(fd_) != 0) return image::ErrnoError("fsync", tmp_dir_ + "/" + file_rel_, errno);
  CloseFile();
  ++files_;
  return Status::Ok();
}

Status ImageReceiver::End(const peer::v1::ImageEnd& end, peer::v1::ReceiveImageReply* reply) {
  if (finished_) return Status::FailedPrecondition("image ended twice");
  if (fd_ >= 0) return Status::InvalidArgument("image ended before the end of '" + file_rel_ + "'");
  if (end.file_count() != files_ || end.total_bytes() != total_bytes_) {
    return Status::Corruption("image '" + name_ + "': source sent " + std::to_string(end.file_count()) + " files, " +
                              std::to_string(end.total_bytes()) + " bytes; received " + std::to_string(files_) +
                              " files, " + std::to_string(total_bytes_) + " bytes");
  }
  if (relayout_) PHOS_RETURN_IF_ERROR(LayOutGpuImg());
  // Every directory of the tree durable before the rename makes the image
  // visible (CommitSync::kSubtree); never over an image of that name.
  bool visible = false;
  Status s = image::CommitDirectory(tmp_dir_, final_dir_,
                                    skip_fsync_ ? image::CommitSync::kNone : image::CommitSync::kSubtree,
                                    image::CommitReplace::kNever, &visible);
  if (!visible) {
    if (s.code() == Status::Code::kAlreadyExists) {
      return Status::AlreadyExists(final_dir_ + " appeared while receiving; the transfer was not committed");
    }
    return s;
  }
  finished_ = true;  // visible now: never Discard it
  PHOS_RETURN_IF_ERROR(s);
  reply->set_path(final_dir_);
  reply->set_bytes(total_bytes_);
  reply->set_files(files_);
  return Status::Ok();
}

void ImageReceiver::Discard() {
  CloseFile();
  if (finished_) return;
  finished_ = true;
  if (Status s = image::RemoveTree(tmp_dir_); !s.ok()) spdlog::warn("peer: cannot remove {}: {}", tmp_dir_, s.ToString());
}

}  // namespace phos::image
