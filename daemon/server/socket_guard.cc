#include "server/socket_guard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace phos::server {
namespace {

std::string ReadPid(int fd) {
  char buf[32] = {};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "unknown";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

// True if something accepts connections on the unix socket at `path`.
bool SomethingListens(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

}  // namespace

SocketGuard::~SocketGuard() { Release(); }

Status SocketGuard::Acquire(const std::string& socket_path, bool* removed_stale) {
  *removed_stale = false;
  sockaddr_un probe{};
  if (socket_path.empty() || socket_path.size() >= sizeof(probe.sun_path)) {
    return Status::InvalidArgument("socket path '" + socket_path + "' must be 1.." +
                                   std::to_string(sizeof(probe.sun_path) - 1) + " characters");
  }
  std::filesystem::path dir = std::filesystem::path(socket_path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return Status::IoError("cannot create socket directory " + dir.string() + ": " +
                             ec.message() + " (run as root, or pick --socket in a writable place)");
    }
  }
  lock_path_ = socket_path + ".lock";
  int fd = open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("open lock file " + lock_path_, errno);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string owner = ReadPid(fd);
    close(fd);
    if (err == EWOULDBLOCK) {
      return Status::FailedPrecondition("another phosd (pid " + owner + ") is running on " +
                                        socket_path + "; stop it first (phos status shows it)");
    }
    return Status::FromErrno("lock " + lock_path_, err);
  }
  // We hold the lock. A daemon that predates locking (or one whose lock file
  // was deleted) could still be listening: never steal a live socket.
  struct stat st {};
  if (lstat(socket_path.c_str(), &st) == 0) {
    if (SomethingListens(socket_path)) {
      close(fd);
      return Status::FailedPrecondition("a live server already listens on " + socket_path +
                                        " but holds no lock; refusing to replace it");
    }
    if (unlink(socket_path.c_str()) != 0) {
      int err = errno;
      close(fd);
      return Status::FromErrno("remove stale socket " + socket_path, err);
    }
    *removed_stale = true;
  }
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno("write pid to " + lock_path_, err);
  }
  socket_path_ = socket_path;
  lock_fd_ = fd;
  return Status::Ok();
}

void SocketGuard::Release() {
  if (lock_fd_ < 0) return;
  // Remove the socket while we still hold the lock, so no new daemon can
  // have created its own socket at the path in between.
  unlink(socket_path_.c_str());
  close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace phos::server
