// PeerService: phosd's PhosPeer gRPC service (proto/peer.proto), the
// daemon-to-daemon plane of live migration (docs/migration.md), and
// PeerServer, the TCP server that carries it (`--listen`).
//
// Every call is authenticated first: the `phos-peer-token` metadata header
// must equal the daemon's token (constant-time compare); others get
// UNAUTHENTICATED and their address is logged once.
#pragma once

#include <functional>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "backend/collective.h"
#include "common/status.h"
#include "peer.grpc.pb.h"
#include "image/precopy_store.h"
#include "peer/data_channel_server.h"
#include "peer/lazy_page_connections.h"

namespace phos::peer {

/// How RestoreImage asks the daemon to restore an image for a peer.
struct PeerRestoreOptions {
  /// The image was dumped from a stopped process: SIGCONT it once it may run.
  bool resume = false;
  /// >= 0: a lazy dump; its memory comes over this connection (the
  /// restorer does not close it; RestoreImage does).
  int lazy_pages_fd = -1;
};
/// Restores the whole-process image in a directory and (resume) lets it
/// run; the daemon's gRPC service provides it (PhosService::RestoreForPeer).
using PeerRestorer = std::function<Status(const std::string& dir, const PeerRestoreOptions& options,
                                          peer::v1::RestoreImageReply* reply)>;

/// Takes a peer's message about a communicator spanning phosds (the
/// backend's DeliverCollective); null when this phosd runs none (no --etcd).
using CollectiveSink = std::function<Status(const backend::FabricMessage& message)>;
/// Starts this phosd's part in a job checkpoint another phosd coordinates
/// (returns at once); null when this phosd has no --etcd.
using CutJoiner = std::function<Status(const std::string& cut)>;
/// Restores ranks of a job image here for a job restore another phosd
/// runs (PhosPeer.RestoreJobRanks; a job migration's destination too);
/// gives up, ending them, once `cancelled()`.
using JobRanksRestorer = std::function<Status(const peer::v1::RestoreJobRanksRequest& request,
                                              const std::function<bool()>& cancelled, std::vector<int>* pids)>;
/// Sends or removes this phosd's part of a job image for a job migration
/// another phosd coordinates (PhosPeer.MoveJobPart); null when this phosd
/// has no --etcd.
using JobPartMover = std::function<Status(const peer::v1::MoveJobPartRequest& request,
                                          peer::v1::MoveJobPartReply* reply)>;

/// What the daemon serves peers with. `restorer` serves RestoreImage (may
/// answer Unavailable while phosd starts); collectives, join_cut and
/// move_job_part are null where phosd has no --etcd (their calls are then
/// refused, saying so).
struct PeerHandlers {
  PeerRestorer restorer;
  CollectiveSink collectives;
  CutJoiner join_cut;
  JobRanksRestorer restore_job_ranks;
  JobPartMover move_job_part;
};

class PeerService final : public peer::v1::PhosPeer::Service {
 public:
  /// Images go to `<checkpoint_root>/incoming/<name>`. `handlers`
  /// (immutable) serve the calls that need the daemon.
  /// `drop_restore_replies` (tests only, --test-drop-restore-reply): every
  /// RestoreImage restores as asked, records its outcome, then answers
  /// UNAVAILABLE instead — a reply lost after the copy already runs.
  PeerService(std::string token, std::string checkpoint_root, std::uint64_t max_receive_bytes,
              PeerHandlers handlers, bool drop_restore_replies = false);

  grpc::Status Ping(grpc::ServerContext* context, const peer::v1::PingRequest* request,
                    peer::v1::PingReply* reply) override;
  grpc::Status RestoreImage(grpc::ServerContext* context, const peer::v1::RestoreImageRequest* request,
                            peer::v1::RestoreImageReply* reply) override;
  grpc::Status RestoreStatus(grpc::ServerContext* context, const peer::v1::RestoreStatusRequest* request,
                             peer::v1::RestoreStatusReply* reply) override;

  grpc::Status Collective(grpc::ServerContext* context, const peer::v1::CollectiveMessage* request,
                          peer::v1::CollectiveReply* reply) override;
  grpc::Status JoinCut(grpc::ServerContext* context, const peer::v1::JoinCutRequest* request,
                       peer::v1::JoinCutReply* reply) override;
  grpc::Status RestoreJobRanks(grpc::ServerContext* context, const peer::v1::RestoreJobRanksRequest* request,
                               peer::v1::RestoreJobRanksReply* reply) override;
  grpc::Status MoveJobPart(grpc::ServerContext* context, const peer::v1::MoveJobPartRequest* request,
                           peer::v1::MoveJobPartReply* reply) override;

  grpc::Status ReceiveImage(grpc::ServerContext* context, grpc::ServerReader<peer::v1::ImageChunk>* reader,
                            peer::v1::ReceiveImageReply* reply) override;
  grpc::Status OpenDataChannel(grpc::ServerContext* context, const peer::v1::OpenDataChannelRequest* request,
                               peer::v1::OpenDataChannelReply* reply) override;

  /// Where OpenDataChannel's tickets come from (PeerServer sets it before
  /// serving; null: OpenDataChannel answers UNIMPLEMENTED and the source
  /// streams through ReceiveImage).
  void SetDataChannelServer(DataChannelServer* server) { data_channels_ = server; }
  /// DataChannelServer's handler: one image (or, by the ticket's
  /// `purpose`, pre-copy) stream over `fd` (data_channel.h), received as
  /// ReceiveImage (Precopy) would, the outcome written back as a
  /// DataChannelReply.
  void ServeDataChannel(int fd, const std::string& peer, int purpose);
  grpc::Status Precopy(grpc::ServerContext* context, grpc::ServerReader<peer::v1::PrecopyChunk>* reader,
                       peer::v1::PrecopyReply* reply) override;

  /// How long a sealed pre-copy waits for its ReceiveImage before it is
  /// dropped (checked whenever a pre-copy or an image arrives).
  static constexpr std::chrono::seconds kPrecopyTtl{120};
  /// Restore outcomes remembered for RestoreStatus (the oldest is dropped).
  static constexpr std::size_t kMaxRestoreRecords = 256;

 private:
  grpc::Status Authenticate(grpc::ServerContext* context);
  /// The next chunk of an image stream: Ok, NotFound at its end (the
  /// source went away), or why it could not be read.
  using NextChunk = std::function<Status(peer::v1::ImageChunk* chunk)>;
  /// One image stream, whichever transport carries it; `peer` names the
  /// source in messages.
  grpc::Status Receive(const NextChunk& next, const std::string& peer, peer::v1::ReceiveImageReply* reply);
  /// The next chunk of a pre-copy stream: Ok, NotFound at its complete end,
  /// Unavailable when the source went away, or why it could not be read.
  using NextPrecopyChunk = std::function<Status(peer::v1::PrecopyChunk* chunk)>;
  /// One pre-copy stream, whichever transport carries it.
  grpc::Status PrecopyFrom(const NextPrecopyChunk& next, const std::string& peer, peer::v1::PrecopyReply* reply);
  Status ReceivePrecopy(const std::shared_ptr<image::PrecopyStore>& store, const NextPrecopyChunk& next);
  /// A DATA_CHANNEL_LAZY_PAGES connection: its LazyPagesHello names the
  /// image; a copy of `fd` is parked in lazy_pages_ for its RestoreImage.
  void ParkLazyPagesChannel(int fd, const std::string& peer);
  /// mu_ held: forgets sealed pre-copies older than kPrecopyTtl.
  void DropExpiredPrecopiesLocked();
  /// The sealed pre-copy of `name`, removed from the registry (its image
  /// claims it), or null.
  std::shared_ptr<image::PrecopyStore> TakePrecopy(const std::string& name);

  /// What RestoreStatus answers about one image name. RESTORE_STATE_UNKNOWN
  /// here means "fenced": RestoreStatus already answered UNKNOWN for a name
  /// no restore had started for, so a later RestoreImage of it is refused.
  struct RestoreRecord {
    peer::v1::RestoreState state = peer::v1::RESTORE_STATE_UNKNOWN;
    peer::v1::RestoreImageReply reply;  // RUNNING: what RestoreImage answered
    std::string error;                  // FAILED: why
  };
  /// mu_ held: sets `name`'s record (a new name drops the oldest beyond
  /// kMaxRestoreRecords).
  void RecordRestoreLocked(const std::string& name, RestoreRecord record);

  struct HeldPrecopy {
    std::shared_ptr<image::PrecopyStore> store;
    bool sealed = false;
    std::chrono::steady_clock::time_point sealed_at;
  };

  const std::string token_;
  const std::string incoming_dir_;
  const std::uint64_t max_receive_bytes_;
  const PeerHandlers handlers_;
  const bool drop_restore_replies_;
  DataChannelServer* data_channels_ = nullptr;  // set before serving, then only read
  LazyPageConnections lazy_pages_;  // its own lock

  std::mutex mu_;  // guards in_flight_, precopies_, refused_hosts_, restores_ and restore_order_
  std::set<std::string> in_flight_;      // image names being received now
  std::map<std::string, HeldPrecopy> precopies_;  // by image name: streaming or sealed, not yet claimed
  std::uint64_t precopy_seq_ = 0;  // makes each pre-copy's directory name unique
  std::set<std::string> refused_hosts_;  // hosts already logged as refused (bounded)
  std::map<std::string, RestoreRecord> restores_;  // by image name; at most kMaxRestoreRecords
  std::deque<std::string> restore_order_;          // restores_'s names, oldest first
};

/// What the peer plane is told at start (phosd's --listen, --peer-token,
/// --max-receive-bytes and the tests' --test-drop-restore-reply).
struct PeerServerOptions {
  std::string listen;            // HOST:PORT
  std::string peer_token_file;   // first line: the token
  std::uint64_t max_receive_bytes = 1ull << 40;
  bool test_drop_restore_reply = false;
};

/// The TCP server of the peer plane; inert unless Start() is called.
class PeerServer {
 public:
  ~PeerServer() { Shutdown(); }
  /// Loads options.peer_token_file, listens on options.listen and serves
  /// PeerService. The token is checked before anything listens.
  Status Start(const PeerServerOptions& options, const std::string& checkpoint_root, PeerHandlers handlers);
  /// Stops serving (in-flight transfers get a short grace period). Idempotent.
  void Shutdown();
  /// The port actually bound (options.listen may say port 0); 0 when not started.
  int port() const { return port_; }

 private:
  // Owned by the Daemon's thread; the service outlives both servers.
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<DataChannelServer> data_channels_;
  int port_ = 0;
};

}  // namespace phos::peer
