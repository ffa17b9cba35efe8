// Helpers criu_client.cc (libcriu) and lazy_pages.cc (the criu command
// line) share: directory and log-name checks, and Check()'s cache. Not part
// of phos_criu's interface.
#pragma once

#include <unistd.h>

#include <mutex>
#include <string>

#include "common/status.h"
#include "criu/criu_client.h"

namespace phos::criu::detail {

// Owns one directory fd.
class DirFd {
 public:
  DirFd() = default;
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  ~DirFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

/// Drops the remembered Check() pass of `criu_binary` ("" = "criu") after a
/// CRIU call with it failed: the next Check() probes again.
void ForgetCheck(const std::string& criu_binary);
/// `criu_binary`, or "criu" when empty.
std::string BinaryName(const std::string& criu_binary);
/// Opens (and with `create`, first makes, mode 0700) directory `path`.
Status OpenDir(const std::string& what, const std::string& path, bool create, DirFd* out);
/// AlreadyExists when `path` already holds CRIU images (*.img): a second
/// dump into it would mix two dumps.
Status CheckNoImages(const std::string& what, const std::string& path);
/// InvalidArgument unless `log_file` is a plain file name (CRIU refuses paths).
Status CheckLogFile(const std::string& what, const std::string& log_file);

/// One CRIU dump at a time per phosd (docs/criu.md "Concurrent dumps"):
/// held around every dump's freeze-and-parasite phase.
std::mutex& OneDumpMutex();

/// CriuClient::Restore of an image with RestoreOptions::lazy_pages
/// (lazy_pages.cc), after Restore's own checks of the arguments, the log
/// name and the images directory.
Status RestoreLazy(const std::string& images_dir, const RestoreOptions& opts, pid_t* restored_pid);

}  // namespace phos::criu::detail
