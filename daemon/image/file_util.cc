#include "image/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

namespace phos::image {
namespace {
constexpr std::string_view kDiskFullPrefix = "disk full: ";
}

Status DiskFullError(std::string_view path, int err) {
  return Status::IoError(std::string(kDiskFullPrefix) + "writing " + std::string(path) + ": " +
                         std::strerror(err) +
                         "; free space on that filesystem or write the checkpoint elsewhere "
                         "(--out); earlier images are untouched");
}

bool IsDiskFull(const Status& s) {
  return s.code() == Status::Code::kIoError &&
         s.message().find(kDiskFullPrefix) != std::string::npos;
}

Status ErrnoError(std::string_view what, std::string_view path, int err) {
  if (err == ENOSPC || err == EDQUOT) return DiskFullError(path, err);
  return Status::FromErrno(std::string(what) + " " + std::string(path), err);
}

void SetWriteLifeHint(int fd, std::uint64_t hint, std::string_view path) {
  if (hint == 0) return;
  std::uint64_t h = hint;
  if (::fcntl(fd, F_SET_RW_HINT, &h) != 0) {
    spdlog::debug("image: F_SET_RW_HINT {} on {} not applied: {}", hint, path,
                  std::strerror(errno));
  }
}

Status WriteFileDurable(const std::string& path, std::string_view bytes,
                        std::uint64_t write_life_hint) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", path, errno);
  SetWriteLifeHint(fd, write_life_hint, path);
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoError("write", path, err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("fsync", path, err);
  }
  if (::close(fd) != 0) return ErrnoError("close", path, errno);
  return Status::Ok();
}

Status ReadSmallFile(const std::string& path, std::uint64_t max_bytes, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(path + " does not exist");
    return ErrnoError("open", path, err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("stat", path, err);
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return Status::Corruption(path + " is " + std::to_string(st.st_size) +
                              " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  out->resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out->size()) {
    ssize_t n = ::pread(fd, out->data() + done, out->size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoError("read", path, err);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out->resize(done);
  ::close(fd);
  return Status::Ok();
}

Status FsyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory", path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return ErrnoError("fsync directory", path, err);
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Status::IoError("remove " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace phos::image
