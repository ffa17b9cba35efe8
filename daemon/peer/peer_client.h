// The source side of the peer plane: streams an image directory to another
// phosd's PhosPeer.ReceiveImage (proto/peer.proto, docs/migration.md). Used
// by `phos send-image` now and by Migrate later.
#pragma once

#include <grpcpp/support/status.h>

#include "peer.grpc.pb.h"
#include "peer.pb.h"

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace phos::peer {

/// A part of a file the destination takes from its pre-copy of the image
/// (PhosPeer.Precopy) instead of the stream: bytes [offset, offset +
/// length) of the file are bytes [copy_offset, +length) of copy `copy_id`.
struct PrecopiedRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t copy_id = 0;
  std::uint64_t copy_offset = 0;
};

struct SendImageOptions {
  /// Bytes per FileData message (1-4 MiB is the sweet spot; the receiver
  /// takes up to 16 MiB).
  std::uint64_t chunk_bytes = 2ull << 20;
  /// Throttle to this many bytes per second; 0 = as fast as possible.
  std::uint64_t max_bytes_per_sec = 0;
  /// How long to wait for the peer to accept the connection.
  int connect_timeout_ms = 5000;
  /// Relative path -> its pre-copied parts (any order, disjoint, inside the
  /// file): sent as references, never read here (the file may have holes
  /// there). Empty: every byte travels.
  std::map<std::string, std::vector<PrecopiedRange>> precopied;
  /// The destination may skip its fsyncs (the image lives until restored).
  bool skip_fsync = false;
  /// How the bytes travel (docs/migration.md "Data channel"): kAuto = a
  /// data channel (raw TCP beside gRPC, data_channel.h) when the peer
  /// offers one and it connects, else gRPC's ReceiveImage stream (said in
  /// the log); kDataChannel = that or an error; kGrpc = gRPC only.
  enum class Transport { kAuto, kGrpc, kDataChannel };
  Transport transport = Transport::kAuto;
};

struct SendImageResult {
  std::string path;  // the committed directory on the destination
  std::uint64_t bytes = 0;          // the image's bytes (pre-copied ones included)
  std::uint64_t streamed_bytes = 0; // of them, the bytes this stream carried
  std::uint32_t files = 0;
  std::string transport;            // "data channel" or "grpc"
};

/// Connects to the peer daemon at `host_port` (waiting until `deadline`)
/// and makes a stub for it (the stub keeps the channel alive). Unavailable,
/// naming the peer, when it does not accept the connection in time.
Status ConnectPeer(const std::string& host_port, std::chrono::system_clock::time_point deadline,
                   std::unique_ptr<peer::v1::PhosPeer::Stub>* stub);

/// A peer's gRPC error as a Status naming the peer: FailedPrecondition for
/// a refused token, the matching code for the peer's own refusals.
Status PeerStatus(const std::string& host_port, const grpc::Status& g);

/// Asks the peer for a data channel for a stream of `purpose` and connects
/// it (data_channel.h), sending the magic and the ticket: `*fd_out` is then
/// ready for frames (send/receive timeouts of 60 s, TCP keepalive on).
/// NotSupported when the peer offers none (an older phosd, or one whose
/// data listener failed); Unavailable when its port cannot be reached;
/// FailedPrecondition for a refused token.
Status OpenDataChannelTo(const std::string& host_port, peer::v1::PhosPeer::Stub* stub, const std::string& token,
                         peer::v1::DataChannelPurpose purpose, int connect_timeout_ms, int* fd_out);

/// Called after every chunk (and once at 0) with bytes sent and the total.
using SendProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

/// Streams every regular file under `dir` (recursively, sorted by path) to
/// the daemon at `host_port` as image `name`, authenticated with `token`.
/// Anything in `dir` other than regular files and directories (symlinks,
/// sockets, ...) is refused before a byte is sent; so is a file whose size
/// changes while it is read (the directory must not be written meanwhile).
/// Errors name the peer and, for its refusals, carry its message:
/// FailedPrecondition for a wrong token (UNAUTHENTICATED), AlreadyExists,
/// InvalidArgument, OutOfMemory (over its --max-receive-bytes), Corruption,
/// Unavailable (not reachable).
Status SendImage(const std::string& host_port, const std::string& token, const std::string& dir,
                 const std::string& name, const SendProgress& progress, SendImageResult* result,
                 const SendImageOptions& options = {});

/// Opens image `name`'s lazy-pages connection to the daemon at `host_port`
/// (a DATA_CHANNEL_LAZY_PAGES data channel; docs/migration.md "Lazy
/// pages"): it waits there for the RestoreImage of `name` with
/// lazy_pages. `*fd_out` is then CRIU's page-server connection (no
/// timeouts, keepalive on); the caller closes it. NotSupported when the
/// peer has no data channel or no lazy pages (an older phosd).
Status OpenLazyPagesChannel(const std::string& host_port, const std::string& token, const std::string& name,
                            int* fd_out, int connect_timeout_ms = 5000);

/// Asks the daemon at `host_port` to restore the whole-process image it
/// received as `request.name()` and, with `resume`, let it run
/// (PhosPeer.RestoreImage). Answers once the process runs there (with
/// `lazy_pages`, once its last page arrived); errors as SendImage's.
/// `request_sent` (optional) says whether the request went out: false when
/// the peer could not even be reached, so it cannot have restored anything.
/// After an error with it true, only RestoreStatusOnPeer can tell whether
/// the copy runs there (the reply may be what was lost).
Status RestoreOnPeer(const std::string& host_port, const std::string& token,
                     const peer::v1::RestoreImageRequest& request, peer::v1::RestoreImageReply* reply, bool* request_sent = nullptr,
                     int connect_timeout_ms = 5000);

/// What became of the RestoreImage of `name` at `host_port`
/// (PhosPeer.RestoreStatus); the whole call (connecting included) is
/// bounded by `timeout_ms`. Errors as SendImage's; NotSupported when the
/// peer's phosd predates RestoreStatus (UNIMPLEMENTED).
/// Note: an UNKNOWN answer fences `name` there (a later RestoreImage of it
/// is refused).
Status RestoreStatusOnPeer(const std::string& host_port, const std::string& token, const std::string& name,
                           peer::v1::RestoreStatusReply* reply, int timeout_ms);

/// Asks the daemon at `host_port` to take part in job checkpoint `cut`
/// (PhosPeer.JoinCut; docs/protocols.md "Jobs across phosds"). Errors as
/// SendImage's.
Status RequestJoinCut(const std::string& host_port, const std::string& token, const std::string& cut,
                      int timeout_ms = 5000);

/// Asks the daemon at `host_port` to restore ranks `rank_dirs` (taken as
/// `pids`) of job image `dir` with communicator generation `generation`
/// (PhosPeer.RestoreJobRanks) and waits until they run; `pids_out`: their
/// pids. Cancels the call (the peer ends what it restored) once
/// `give_up()` says so. Errors as SendImage's.
/// `job_name`: the job's name for the restored ranks ("" = dir's manifest's).
Status RequestRestoreJobRanks(const std::string& host_port, const std::string& token, const std::string& dir,
                              const std::vector<std::string>& rank_dirs, const std::vector<pid_t>& pids,
                              std::uint64_t generation, const std::function<bool()>& give_up,
                              std::vector<int>* pids_out, const std::string& job_name = "");

/// Asks the daemon at `host_port` to send its part of job image `dir` to
/// `request.destination()` or to remove it (PhosPeer.MoveJobPart; a job
/// migration across phosds) and waits for the outcome. Errors as
/// SendImage's.
Status RequestMoveJobPart(const std::string& host_port, const std::string& token,
                          const peer::v1::MoveJobPartRequest& request, peer::v1::MoveJobPartReply* reply);

/// Checks that the daemon at `host_port` answers and accepts `token`
/// (PhosPeer.Ping); errors as SendImage's.
Status PingPeer(const std::string& host_port, const std::string& token, int connect_timeout_ms = 5000);

}  // namespace phos::peer
