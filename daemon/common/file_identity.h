// FileIdentity: what tells one version of a file from another without
// reading it. A write changes mtime and ctime (ctime cannot be set from user
// space), a replacement changes the inode; stat follows symlinks, so a
// re-pointed link is a different file too. Used where phosd remembers that
// a file was checked (CRIU's Check cache per binary, a template's verified
// cache copy) and must notice when it changed since.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace phos {

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;

  static FileIdentity Of(const struct stat& st) {
    auto ns = [](const struct timespec& t) { return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; };
    return FileIdentity{st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)};
  }
};

/// The identity of `path` (stat, following symlinks); false when it cannot
/// be stat'ed.
inline bool IdentifyFile(const std::string& path, FileIdentity* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  *out = FileIdentity::Of(st);
  return true;
}

}  // namespace phos
