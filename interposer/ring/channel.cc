#include "ring/channel.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/proc_nspid.h"

namespace phos::ring {
namespace {

/// True when `host_pid` is `ns_pid` inside its own pid namespace: an app
/// started by `phos run` (pid 1 of a new namespace) says getpid() = 1 in its
/// hello while SO_PEERCRED names it as phosd sees it. The innermost NSpid
/// of /proc/HOST_PID/status is the pid the app itself sees (daemon side:
/// only the accepting end of the channel runs this).
bool IsPidInOwnNamespace(pid_t host_pid, long ns_pid) {
  std::vector<long> ids;
  return ReadNsPids(host_pid, &ids).ok() && !ids.empty() && ids.back() == ns_pid;
}


constexpr uint32_t kHelloMagic = 0x48534850;    // "PHSH"
constexpr uint32_t kWelcomeMagic = 0x57534850;  // "PHSW"
constexpr uint32_t kSegmentMagic = 0x47534850;  // "PHSG"

// Wire records (little-endian, natural layout).
struct HelloWire {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  uint32_t cmdline_bytes;
  uint64_t session_id;
};
struct WelcomeWire {
  uint32_t magic;
  uint32_t version;
  int32_t code;            // Status::Code; 0 = OK, memfd attached
  uint32_t message_bytes;  // error text follows
  uint64_t session_id;
  uint64_t region_bytes;
};
struct SegmentWire {
  uint32_t magic;
  uint32_t version;
  uint64_t segment_id;
  uint64_t bytes;
  uint64_t app_base;
};
constexpr size_t kMaxRecord = sizeof(HelloWire) + kMaxCmdlineBytes;

Status MakeAddr(const std::string& path, sockaddr_un* addr, socklen_t* len) {
  *addr = {};
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr->sun_path)) {
    return Status::InvalidArgument("socket path empty or too long: " + path);
  }
  std::memcpy(addr->sun_path, path.data(), path.size());
  if (path[0] == '@') addr->sun_path[0] = '\0';  // abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (path[0] == '@' ? 0 : 1));
  return Status::Ok();
}

// Waits until fd is readable; NotReady on timeout.
Status WaitReadable(int fd, int timeout_ms, const char* what) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    int rc = poll(&p, 1, timeout_ms);
    if (rc > 0) return Status::Ok();
    if (rc == 0) return Status::NotReady(std::string(what) + ": timed out");
    if (errno != EINTR) return Status::FromErrno(what, errno);
  }
}

// Receives one record (and at most one fd). *n = 0 means EOF.
Status RecvRecord(int fd, std::vector<std::byte>* buf, size_t* n, int* passed_fd) {
  buf->resize(kMaxRecord + 1);
  iovec iov{buf->data(), buf->size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t rc;
  do {
    rc = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return Status::FromErrno("recvmsg on the ring channel", errno);
  if (passed_fd) *passed_fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      std::vector<int> fds(nfds);
      std::memcpy(fds.data(), CMSG_DATA(c), nfds * sizeof(int));
      for (size_t i = 0; i < nfds; ++i) {
        if (passed_fd && *passed_fd < 0) {
          *passed_fd = fds[i];
        } else {
          close(fds[i]);  // never keep fds we did not ask for
        }
      }
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    if (passed_fd && *passed_fd >= 0) close(*passed_fd);
    return Status::Corruption("ring channel: oversized record");
  }
  *n = static_cast<size_t>(rc);
  return Status::Ok();
}

Status SendRecord(int fd, const void* data, size_t n, int pass_fd) {
  iovec iov{const_cast<void*>(data), n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  ssize_t rc;
  do {
    rc = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return Status::FromErrno("sendmsg on the ring channel", errno);
  return Status::Ok();
}

void SendWelcome(int fd, const Status& status, uint64_t session_id, uint64_t region_bytes, int memfd) {
  std::vector<std::byte> buf(sizeof(WelcomeWire));
  WelcomeWire w{kWelcomeMagic, kProtocolVersion, static_cast<int32_t>(status.code()), 0, session_id,
                region_bytes};
  std::string msg = status.message().substr(0, 1024);
  w.message_bytes = static_cast<uint32_t>(msg.size());
  std::memcpy(buf.data(), &w, sizeof(w));
  buf.insert(buf.end(), reinterpret_cast<const std::byte*>(msg.data()),
             reinterpret_cast<const std::byte*>(msg.data()) + msg.size());
  (void)SendRecord(fd, buf.data(), buf.size(), memfd);
}

Status MapFd(int fd, size_t size, bool create, void** base) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(create ? "mmap new ring region" : "mmap ring region", errno);
  *base = p;
  return Status::Ok();
}

}  // namespace

bool SocketPeerAlive(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int rc = poll(&p, 1, 0);
  if (rc < 0) return errno == EINTR;
  if (rc == 0) return true;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return false;
  if (p.revents & POLLIN) {
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

// ---------------------------------------------------------------- region

SharedRegion::~SharedRegion() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

Status SharedRegion::Create(const RingConfig& config, uint64_t session_id, std::unique_ptr<SharedRegion>* out) {
  RingGeometry g;
  PHOS_RETURN_IF_ERROR(ComputeGeometry(config, session_id, &g));
  std::unique_ptr<SharedRegion> r(new SharedRegion());
  r->fd_ = memfd_create("phos-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r->fd_ < 0) return Status::FromErrno("memfd_create", errno);
  if (ftruncate(r->fd_, static_cast<off_t>(g.region_bytes)) != 0) return Status::FromErrno("ftruncate ring memfd", errno);
  // The app must not be able to shrink the file under phosd's mapping
  // (phosd would take SIGBUS) nor change the seals.
  if (fcntl(r->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return Status::FromErrno("seal ring memfd", errno);
  }
  PHOS_RETURN_IF_ERROR(MapFd(r->fd_, g.region_bytes, true, &r->base_));
  r->size_ = g.region_bytes;
  r->geometry_ = g;
  InitRegion(r->base_, g);
  *out = std::move(r);
  return Status::Ok();
}

Status SharedRegion::CreateAnonymous(const RingConfig& config, uint64_t session_id,
                                     std::unique_ptr<SharedRegion>* out) {
  RingGeometry g;
  PHOS_RETURN_IF_ERROR(ComputeGeometry(config, session_id, &g));
  void* p = mmap(nullptr, g.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno("mmap anonymous ring region", errno);
  std::unique_ptr<SharedRegion> r(new SharedRegion());
  r->base_ = p;
  r->size_ = g.region_bytes;
  r->geometry_ = g;
  InitRegion(p, g);
  *out = std::move(r);
  return Status::Ok();
}

Status SharedRegion::Map(int fd, std::unique_ptr<SharedRegion>* out) {
  std::unique_ptr<SharedRegion> r(new SharedRegion());
  r->fd_ = fd;
  struct stat st;
  if (fstat(fd, &st) != 0) return Status::FromErrno("fstat ring memfd", errno);
  if (st.st_size < static_cast<off_t>(kPage) || st.st_size > (off_t{1} << 34)) {
    return Status::Corruption("ring memfd has an implausible size");
  }
  PHOS_RETURN_IF_ERROR(MapFd(fd, static_cast<size_t>(st.st_size), false, &r->base_));
  r->size_ = static_cast<size_t>(st.st_size);
  PHOS_RETURN_IF_ERROR(AttachRegion(r->base_, r->size_, &r->geometry_));
  *out = std::move(r);
  return Status::Ok();
}

// ---------------------------------------------------------------- phosd side

ChannelListener::~ChannelListener() {
  if (fd_ >= 0) close(fd_);
  if (!path_.empty() && path_[0] != '@') unlink(path_.c_str());
}

Status ChannelListener::Listen(const std::string& path, std::unique_ptr<ChannelListener>* out) {
  sockaddr_un addr;
  socklen_t len;
  PHOS_RETURN_IF_ERROR(MakeAddr(path, &addr, &len));
  std::unique_ptr<ChannelListener> l(new ChannelListener());
  l->fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (l->fd_ < 0) return Status::FromErrno("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  if (path[0] != '@') unlink(path.c_str());
  if (bind(l->fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Status::FromErrno("bind " + path, errno);
  }
  if (path[0] != '@') {
    l->path_ = path;
    chmod(path.c_str(), 0660);
  }
  if (listen(l->fd_, 64) != 0) return Status::FromErrno("listen " + path, errno);
  *out = std::move(l);
  return Status::Ok();
}

Status ChannelListener::Accept(int timeout_ms, std::unique_ptr<ChannelConnection>* out) {
  PHOS_RETURN_IF_ERROR(WaitReadable(fd_, timeout_ms, "accept on the ring channel"));
  std::unique_ptr<ChannelConnection> c(new ChannelConnection());
  c->fd_ = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (c->fd_ < 0) return Status::FromErrno("accept4 on the ring channel", errno);
  ucred cred{};
  socklen_t clen = sizeof(cred);
  if (getsockopt(c->fd_, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
    return Status::FromErrno("SO_PEERCRED", errno);
  }
  c->peer_pid_ = cred.pid;
  c->peer_uid_ = cred.uid;
  Status s = WaitReadable(c->fd_, timeout_ms, "hello on the ring channel");
  if (!s.ok()) return s;
  std::vector<std::byte> buf;
  size_t n = 0;
  s = RecvRecord(c->fd_, &buf, &n, nullptr);
  if (!s.ok()) {
    c->Reject(s);
    return s;
  }
  if (n == 0) return Status::Unavailable("ring channel: app closed before its hello");
  HelloWire w;
  if (n < sizeof(w)) {
    s = Status::Corruption("ring channel: short hello (" + std::to_string(n) + " bytes)");
  } else {
    std::memcpy(&w, buf.data(), sizeof(w));
    if (w.magic != kHelloMagic) {
      s = Status::Corruption("ring channel: bad hello magic");
    } else if (w.version != kProtocolVersion) {
      s = Status::FailedPrecondition("ring channel: protocol version " + std::to_string(w.version) +
                                     ", phosd speaks " + std::to_string(kProtocolVersion));
    } else if (w.cmdline_bytes > kMaxCmdlineBytes || sizeof(w) + w.cmdline_bytes != n) {
      s = Status::Corruption("ring channel: hello length does not match its command line");
    } else if (w.pid != cred.pid && !IsPidInOwnNamespace(cred.pid, w.pid)) {
      s = Status::InvalidArgument("ring channel: hello claims pid " + std::to_string(w.pid) +
                                  " but the socket's peer is pid " + std::to_string(cred.pid));
    }
  }
  if (!s.ok()) {
    c->Reject(s);
    return s;
  }
  c->hello_.protocol_version = w.version;
  c->hello_.pid = cred.pid;  // as phosd sees it (the app may be in its own pid namespace)
  c->hello_.session_id = w.session_id;
  c->hello_.cmdline.assign(reinterpret_cast<const char*>(buf.data()) + sizeof(w), w.cmdline_bytes);
  *out = std::move(c);
  return Status::Ok();
}

std::unique_ptr<ChannelConnection> ChannelConnection::Adopt(int fd, pid_t pid, uid_t uid, Hello hello) {
  std::unique_ptr<ChannelConnection> c(new ChannelConnection());
  c->fd_ = fd;
  c->peer_pid_ = pid;
  c->peer_uid_ = uid;
  c->hello_ = std::move(hello);
  return c;
}

ChannelConnection::~ChannelConnection() {
  if (fd_ >= 0) close(fd_);
}

Status ChannelConnection::Establish(const RingConfig& config, uint64_t session_id,
                                    std::unique_ptr<SharedRegion>* region) {
  std::unique_ptr<SharedRegion> r;
  Status s = SharedRegion::Create(config, session_id, &r);
  if (!s.ok()) {
    Reject(s);
    return s;
  }
  WelcomeWire w{kWelcomeMagic, kProtocolVersion, 0, 0, session_id, r->size()};
  PHOS_RETURN_IF_ERROR(SendRecord(fd_, &w, sizeof(w), r->fd()));
  *region = std::move(r);
  return Status::Ok();
}

void ChannelConnection::Reject(const Status& why) {
  if (fd_ < 0) return;
  SendWelcome(fd_, why.ok() ? Status::Internal("rejected") : why, 0, 0, -1);
  close(fd_);
  fd_ = -1;
}

bool ChannelConnection::PeerAlive() const { return SocketPeerAlive(fd_); }

Status ChannelConnection::ReceiveHostSegment(HostSegmentRecord* rec, int* memfd) {
  *memfd = -1;
  if (fd_ < 0) return Status::Unavailable("ring channel closed");
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) {
    return Status::NotReady("no host segment record is queued on the ring channel");
  }
  std::vector<std::byte> buf;
  size_t n = 0;
  int fd = -1;
  PHOS_RETURN_IF_ERROR(RecvRecord(fd_, &buf, &n, &fd));
  SegmentWire w{};
  if (n != sizeof(w) || fd < 0) {
    if (fd >= 0) close(fd);
    return Status::Corruption("ring channel: malformed host segment record (" + std::to_string(n) + " bytes, " +
                              (fd < 0 ? "no fd" : "with fd") + ")");
  }
  std::memcpy(&w, buf.data(), sizeof(w));
  if (w.magic != kSegmentMagic || w.version != kProtocolVersion) {
    close(fd);
    return Status::Corruption("ring channel: bad host segment record magic or version");
  }
  rec->segment_id = w.segment_id;
  rec->bytes = w.bytes;
  rec->app_base = w.app_base;
  *memfd = fd;
  return Status::Ok();
}

// ---------------------------------------------------------------- app side

ChannelClient::~ChannelClient() { Close(); }

void ChannelClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool ChannelClient::PeerAlive() const { return SocketPeerAlive(fd_); }

Status ChannelClient::SendHostSegment(const HostSegmentRecord& rec, int memfd) {
  if (fd_ < 0) return Status::Unavailable("ring channel closed");
  if (memfd < 0) return Status::InvalidArgument("host segment without a memfd");
  SegmentWire w{kSegmentMagic, kProtocolVersion, rec.segment_id, rec.bytes, rec.app_base};
  return SendRecord(fd_, &w, sizeof(w), memfd);
}

Status ChannelClient::Connect(const std::string& path, const Hello& hello, int timeout_ms,
                              std::unique_ptr<ChannelClient>* out, std::unique_ptr<SharedRegion>* region) {
  sockaddr_un addr;
  socklen_t len;
  PHOS_RETURN_IF_ERROR(MakeAddr(path, &addr, &len));
  std::unique_ptr<ChannelClient> c(new ChannelClient());
  c->fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (c->fd_ < 0) return Status::FromErrno("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  int rc;
  do {
    rc = connect(c->fd_, reinterpret_cast<sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return Status::FromErrno("connect to phosd ring channel " + path, errno).WithContext("phosd not running?");
  std::string cmd = hello.cmdline.substr(0, kMaxCmdlineBytes);
  HelloWire w{kHelloMagic, hello.protocol_version, hello.pid, static_cast<uint32_t>(cmd.size()), hello.session_id};
  std::vector<std::byte> buf(sizeof(w) + cmd.size());
  std::memcpy(buf.data(), &w, sizeof(w));
  if (!cmd.empty()) std::memcpy(buf.data() + sizeof(w), cmd.data(), cmd.size());
  PHOS_RETURN_IF_ERROR(SendRecord(c->fd_, buf.data(), buf.size(), -1));
  PHOS_RETURN_IF_ERROR(WaitReadable(c->fd_, timeout_ms, "welcome from phosd"));
  size_t n = 0;
  int memfd = -1;
  PHOS_RETURN_IF_ERROR(RecvRecord(c->fd_, &buf, &n, &memfd));
  if (n == 0) return Status::Unavailable("phosd closed the ring channel during the handshake");
  WelcomeWire ww;
  if (n < sizeof(ww)) {
    if (memfd >= 0) close(memfd);
    return Status::Corruption("ring channel: short welcome");
  }
  std::memcpy(&ww, buf.data(), sizeof(ww));
  if (ww.magic != kWelcomeMagic || sizeof(ww) + ww.message_bytes != n) {
    if (memfd >= 0) close(memfd);
    return Status::Corruption("ring channel: malformed welcome");
  }
  if (ww.code != 0) {
    if (memfd >= 0) close(memfd);
    std::string m(reinterpret_cast<const char*>(buf.data()) + sizeof(ww), ww.message_bytes);
    auto code = static_cast<Status::Code>(ww.code);
    if (ww.code < 0 || ww.code > static_cast<int32_t>(Status::Code::kInternal)) code = Status::Code::kInternal;
    return Status(code, "phosd refused the session: " + m);
  }
  if (memfd < 0) return Status::Corruption("ring channel: welcome without the region fd");
  std::unique_ptr<SharedRegion> r;
  PHOS_RETURN_IF_ERROR(SharedRegion::Map(memfd, &r));
  if (r->size() != ww.region_bytes) return Status::Corruption("ring channel: region size mismatch");
  c->session_id_ = ww.session_id;
  *out = std::move(c);
  *region = std::move(r);
  return Status::Ok();
}

}  // namespace phos::ring
