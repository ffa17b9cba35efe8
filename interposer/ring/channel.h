// The setup channel: a unix SOCK_SEQPACKET connection per app process.
//
//   app (libphos.so)                         phosd
//   connect(path) ───────────────────────▶  accept; SO_PEERCRED -> (pid, uid)
//   Hello {magic, version, pid, session_id, cmdline} ──▶
//                                           pid != SO_PEERCRED pid -> Welcome{error}, close
//                                           memfd_create, ftruncate, seal
//                                           (F_SEAL_SHRINK|F_SEAL_SEAL), mmap,
//                                           InitRegion
//   ◀── Welcome {magic, version, status, session_id, region_bytes} + SCM_RIGHTS(memfd)
//   mmap(memfd), AttachRegion
//
// Both messages are single SEQPACKET records (message boundaries kept, so a
// short or oversized record is rejected, never mis-framed). After the
// handshake the socket carries no data: it stays open as the liveness
// signal. When the app dies its end closes and phosd's poll() reports
// POLLHUP / recv() returns 0; when phosd dies the app sees the same.
// PeerAlive() tests this without blocking; fd() can go into an epoll set.
// The ring's waits call PeerAlive() every WaitPolicy::check_period_ms while
// asleep (waiter.h), which bounds how long a call can hang after phosd is
// killed. (Wake-ups themselves go through the futex words in the region,
// not the socket: a futex wake is cheaper than a send+poll pair and lets
// the waiter spin on the same word first.)
//
// Pid namespaces: SO_PEERCRED reports the pid as seen from phosd's
// namespace; the app must send that pid (same namespace) or be rejected.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "ring/ring_layout.h"

namespace phos::ring {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxCmdlineBytes = 4000;

struct Hello {
  uint32_t protocol_version = kProtocolVersion;
  int32_t pid = 0;          // the app's pid (checked against SO_PEERCRED)
  uint64_t session_id = 0;  // 0 = new session; else the session to reattach
  std::string cmdline;      // NUL-separated argv, truncated to kMaxCmdlineBytes
};

/// A shared pinned host-memory segment (docs/interposer.md "Pinned host
/// memory and copies"): after the handshake the app may send records of
/// this kind, each one SEQPACKET record with SCM_RIGHTS(the segment's
/// memfd), and then Calls wire::op::kHostSegmentRegister naming the same
/// segment; phosd's handler takes the record off the socket. The app
/// serialises send + call (Connection) so records and calls pair up in
/// order; phosd rejects a record that does not match its call.
struct HostSegmentRecord {
  uint64_t segment_id = 0;
  uint64_t bytes = 0;
  uint64_t app_base = 0;  // where the app mapped it
};

/// A mapped ring region and its memfd (RAII: unmaps and closes).
class SharedRegion {
 public:
  /// phosd: creates, sizes, seals and maps a fresh region and writes its
  /// header.
  static Status Create(const RingConfig& config, uint64_t session_id, std::unique_ptr<SharedRegion>* out);
  /// app: maps a region received over the channel and validates its header.
  /// Takes ownership of `fd` (closed on failure too).
  static Status Map(int fd, std::unique_ptr<SharedRegion>* out);
  /// Maps a region in anonymous shared memory (no memfd; for in-process
  /// tests and fork-based benchmarks).
  static Status CreateAnonymous(const RingConfig& config, uint64_t session_id,
                                std::unique_ptr<SharedRegion>* out);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  void* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  const RingGeometry& geometry() const { return geometry_; }

 private:
  SharedRegion() = default;
  void* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  RingGeometry geometry_;
};

/// phosd's end of one app's channel.
class ChannelConnection {
 public:
  ~ChannelConnection();
  int fd() const { return fd_; }
  pid_t peer_pid() const { return peer_pid_; }
  uid_t peer_uid() const { return peer_uid_; }
  const Hello& hello() const { return hello_; }
  /// Creates the region, sends the welcome with the memfd.
  Status Establish(const RingConfig& config, uint64_t session_id, std::unique_ptr<SharedRegion>* region);
  /// Sends a refusal and closes the socket.
  void Reject(const Status& why);
  /// False once the app has closed its end or died. Never blocks.
  bool PeerAlive() const;
  /// Takes the next queued host-segment record and its memfd (the caller
  /// owns *memfd). Never blocks: NotReady when no record is queued;
  /// Corruption for a malformed record or one without exactly one fd.
  Status ReceiveHostSegment(HostSegmentRecord* rec, int* memfd);
  /// A connection phosd did not accept: its end of a socketpair whose other
  /// end CRIU handed to a restored app (whole-process restore,
  /// daemon/server/process_restore.h). `pid`/`uid`/`hello` come from the
  /// checkpoint image (SO_PEERCRED would name phosd itself). Takes `fd`.
  static std::unique_ptr<ChannelConnection> Adopt(int fd, pid_t pid, uid_t uid, Hello hello);

 private:
  friend class ChannelListener;
  int fd_ = -1;
  pid_t peer_pid_ = 0;
  uid_t peer_uid_ = 0;
  Hello hello_;
};

class ChannelListener {
 public:
  /// Binds and listens on `path` (a stale socket file is replaced; a path
  /// starting with '@' is an abstract socket name). Mode 0660.
  static Status Listen(const std::string& path, std::unique_ptr<ChannelListener>* out);
  ~ChannelListener();
  int fd() const { return fd_; }
  /// Accepts one app and reads its hello (waiting at most timeout_ms for
  /// each). A hello whose pid differs from SO_PEERCRED, a bad magic or
  /// version, or a malformed record is refused (the app gets the reason)
  /// and reported as an error; the listener stays usable.
  Status Accept(int timeout_ms, std::unique_ptr<ChannelConnection>* out);

 private:
  int fd_ = -1;
  std::string path_;
};

/// The app's end.
class ChannelClient {
 public:
  /// Connects, says hello, receives and maps the region.
  static Status Connect(const std::string& path, const Hello& hello, int timeout_ms,
                        std::unique_ptr<ChannelClient>* out, std::unique_ptr<SharedRegion>* region);
  ~ChannelClient();
  int fd() const { return fd_; }
  uint64_t session_id() const { return session_id_; }
  /// False once phosd closed its end or died. Never blocks.
  bool PeerAlive() const;
  /// Sends one host-segment record with `memfd` (not closed here).
  Status SendHostSegment(const HostSegmentRecord& rec, int memfd);
  /// Closes the socket (detach).
  void Close();

 private:
  int fd_ = -1;
  uint64_t session_id_ = 0;
};

/// Shared by both ends: non-blocking liveness test of a connected socket.
bool SocketPeerAlive(int fd);

}  // namespace phos::ring
