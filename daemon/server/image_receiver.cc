#include "server/image_receiver.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "image/file_util.h"

namespace phos::server {
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
    if (std::find(dirs_.begin(), dirs_.end(), dir) == dirs_.end()) dirs_.push_back(dir);
  }
  const std::string path = tmp_dir_ + "/" + rel;
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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
  if (data.has_ref()) {
    if (size != 0) return Status::InvalidArgument("a chunk of '" + file_rel_ + "' carries both bytes and a pre-copy reference");
    if (!options_.precopy) {
      return Status::FailedPrecondition("a chunk of '" + file_rel_ + "' refers to a pre-copy, but no pre-copy of '" +
                                        name_ + "' was received (or it expired)");
    }
    PHOS_RETURN_IF_ERROR(options_.precopy->Read(data.ref(), &bytes).WithContext("'" + file_rel_ + "' at offset " +
                                                                              std::to_string(data.offset())));
    size = static_cast<std::size_t>(data.ref().length());
  }
  const std::uint64_t limit = std::min(announced_bytes_, options_.max_bytes);
  if (total_bytes_ + size > limit) {
    return Status::OutOfMemory("image '" + name_ + "' exceeds " + std::to_string(limit) + " bytes (" +
                               (limit == announced_bytes_ ? "its announced size" : "--max-receive-bytes") + ")");
  }
  // FileEnd's xxh3 covers the bytes the stream carried; pre-copied parts are
  // covered by the image's chunk checksums (proto/peer.proto).
  if (!data.has_ref()) XXH3_64bits_update(xxh_, bytes, size);
  PHOS_RETURN_IF_ERROR(Append(bytes, size));
  if (data.has_ref()) precopied_bytes_ += size;
  // Start writeback of every completed 64 MiB now (no waiting), so the
  // fsync at FileEnd finds little left to write — the disk works while the
  // network delivers instead of after. Not for an image nobody fsyncs.
  constexpr std::uint64_t kWritebackStep = 64ull << 20;
  const std::uint64_t before = file_bytes_ / kWritebackStep;
  file_bytes_ += size;
  total_bytes_ += size;
  if (!skip_fsync_ && file_bytes_ / kWritebackStep != before) {
    const std::uint64_t end = (file_bytes_ / kWritebackStep) * kWritebackStep;
    (void)sync_file_range(fd_, static_cast<off_t>(end - kWritebackStep), static_cast<off_t>(kWritebackStep),
                          SYNC_FILE_RANGE_WRITE);
  }
  return Status::Ok();
}

Status ImageReceiver::Append(const char* bytes, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = write(fd_, bytes + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return image::ErrnoError("write", tmp_dir_ + "/" + file_rel_, errno);
    }
    done += static_cast<std::size_t>(w);
  }
  return Status::Ok();
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
  // Deepest first, then the image directory itself: every entry durable
  // before the rename makes the image visible.
  std::sort(dirs_.begin(), dirs_.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  if (!skip_fsync_) {
    for (const std::string& d : dirs_) PHOS_RETURN_IF_ERROR(image::FsyncDir(d));
    PHOS_RETURN_IF_ERROR(image::FsyncDir(tmp_dir_));
  }
  if (renameat2(AT_FDCWD, tmp_dir_.c_str(), AT_FDCWD, final_dir_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {
      return Status::AlreadyExists(final_dir_ + " appeared while receiving; the transfer was not committed");
    }
    return image::ErrnoError("rename to", final_dir_, errno);
  }
  finished_ = true;  // visible now: never Discard it
  if (!skip_fsync_) PHOS_RETURN_IF_ERROR(image::FsyncDir(options_.incoming_dir));
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

}  // namespace phos::server
