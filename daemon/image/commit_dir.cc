#include "image/commit_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

#include <spdlog/spdlog.h>

#include "image/file_util.h"

namespace phos::image {
namespace {

Status SyncFilesystemOf(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", dir, errno);
  const int rc = ::syncfs(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError("syncfs", dir, err);
  return Status::Ok();
}

Status SyncSubtree(const std::string& dir) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path().string());
  }
  if (ec) return Status::IoError("listing " + dir + ": " + ec.message());
  // Deepest first: a directory's entry is durable before its parent's.
  std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& d : dirs) PHOS_RETURN_IF_ERROR(FsyncDir(d));
  return FsyncDir(dir);
}

// The directory holding `dir` ("." for a bare name; trailing slashes ignored).
std::string ParentOf(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

Status CommitDirectory(const std::string& staged, const std::string& final_dir, CommitSync sync,
                       CommitReplace replace, bool* visible) {
  if (visible != nullptr) *visible = false;
  switch (sync) {
    case CommitSync::kNone: break;
    case CommitSync::kDirectory: PHOS_RETURN_IF_ERROR(FsyncDir(staged)); break;
    case CommitSync::kSubtree: PHOS_RETURN_IF_ERROR(SyncSubtree(staged)); break;
    case CommitSync::kFilesystem: PHOS_RETURN_IF_ERROR(SyncFilesystemOf(staged)); break;
  }
  bool exchanged = false;
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) != 0) {
    const int err = errno;
    if (err != EEXIST && err != ENOTEMPTY) return ErrnoError("rename " + staged + " to", final_dir, err);
    if (replace == CommitReplace::kNever) {
      return Status::AlreadyExists(final_dir + " already exists (it appeared while " + staged + " was built)");
    }
    if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
      return ErrnoError("exchange " + staged + " with", final_dir, errno);
    }
    exchanged = true;
  }
  if (visible != nullptr) *visible = true;
  if (exchanged) {
    // The old tree is at `staged` now; the new one is complete at final_dir.
    if (Status r = RemoveTree(staged); !r.ok()) spdlog::warn("{} (the replaced copy of {})", r.ToString(), final_dir);
  }
  if (sync == CommitSync::kNone) return Status::Ok();
  return FsyncDir(ParentOf(final_dir));
}

}  // namespace phos::image
