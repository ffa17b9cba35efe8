#include "peer/peer_service.h"

#include "common/version.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/grpc_status.h"
#include "image/image_receiver.h"
#include "peer/data_channel.h"
#include "peer/fabric_message.h"
#include "peer/peer_token.h"

namespace phos::peer {

using image::CheckImageName;
using image::ImageReceiver;
using image::ImageReceiverOptions;
using image::PrecopyStore;
namespace {

using peer::v1::ImageChunk;

// Data chunks are 1-4 MiB; leave room for larger ones and the framing.
constexpr int kMaxGrpcMessageBytes = (16 << 20) + (64 << 10);
// Distinct refused hosts remembered for "log once"; beyond it, each
// refusal is logged at debug only (a scan cannot fill the log or memory).
constexpr std::size_t kMaxRefusedHosts = 1024;

// "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5" (ports change per connection).
std::string PeerHost(const std::string& peer) {
  const auto colon = peer.rfind(':');
  return colon == std::string::npos || colon < 5 ? peer : peer.substr(0, colon);
}

}  // namespace

PeerService::PeerService(std::string token, std::string checkpoint_root, std::uint64_t max_receive_bytes,
                         PeerHandlers handlers, bool drop_restore_replies)
    : token_(std::move(token)),
      incoming_dir_(std::move(checkpoint_root) + "/incoming"),
      max_receive_bytes_(max_receive_bytes),
      handlers_(std::move(handlers)),
      drop_restore_replies_(drop_restore_replies) {}

grpc::Status PeerService::RestoreJobRanks(grpc::ServerContext* context,
                                          const peer::v1::RestoreJobRanksRequest* request,
                                          peer::v1::RestoreJobRanksReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  if (!handlers_.restore_job_ranks) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this phosd restores no ranks of jobs for peers");
  }
  for (const std::string& d : request->rank_dirs()) {
    if (std::string why = CheckImageName(d); !why.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
  }
  if (request->pids_size() != request->rank_dirs_size() || request->dir().empty() || request->dir()[0] != '/') {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a job restore request needs an absolute dir and a pid per rank");
  }
  std::vector<int> pids;
  Status s = handlers_.restore_job_ranks(*request, [context] { return context->IsCancelled(); }, &pids);
  if (!s.ok()) return ToGrpcStatus(s);
  for (int p : pids) reply->add_pids(p);
  return grpc::Status::OK;
}

grpc::Status PeerService::MoveJobPart(grpc::ServerContext* context, const peer::v1::MoveJobPartRequest* request,
                                      peer::v1::MoveJobPartReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  if (!handlers_.move_job_part) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this phosd moves no parts of job images (start it with --etcd)");
  }
  if (request->dir().empty() || request->dir()[0] != '/') {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a job part is named by its absolute directory");
  }
  if (request->action() == peer::v1::MoveJobPartRequest::SEND) {
    if (std::string why = CheckImageName(request->name()); !why.empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
    }
    if (request->destination().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sending a job part needs a destination");
    }
  }
  return ToGrpcStatus(handlers_.move_job_part(*request, reply));
}

grpc::Status PeerService::JoinCut(grpc::ServerContext* context, const peer::v1::JoinCutRequest* request,
                                  peer::v1::JoinCutReply*) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  if (!handlers_.join_cut) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this phosd takes part in no job checkpoints across phosds (start it with --etcd)");
  }
  const std::string& cut = request->cut();
  if (cut.size() != 16 || cut.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a cut is named by 16 hex digits");
  }
  return ToGrpcStatus(handlers_.join_cut(cut));
}

grpc::Status PeerService::Collective(grpc::ServerContext* context, const peer::v1::CollectiveMessage* request,
                                     peer::v1::CollectiveReply*) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  if (!handlers_.collectives) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this phosd runs no NCCL communicators across phosds (start it with --etcd)");
  }
  backend::FabricMessage message;
  if (Status s = DecodeFabricMessage(*request, &message); !s.ok()) return ToGrpcStatus(s);
  return ToGrpcStatus(handlers_.collectives(message));
}

grpc::Status PeerService::Ping(grpc::ServerContext* context, const peer::v1::PingRequest*,
                               peer::v1::PingReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  reply->set_version(VersionString());
  return grpc::Status::OK;
}

grpc::Status PeerService::RestoreImage(grpc::ServerContext* context, const peer::v1::RestoreImageRequest* request,
                                       peer::v1::RestoreImageReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  if (std::string why = CheckImageName(request->name()); !why.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
  }
  if (!handlers_.restorer) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this phosd cannot restore for peers");
  const std::string& name = request->name();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_.count(name) != 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "image '" + name + "' is still being received");
    }
    if (auto it = restores_.find(name); it != restores_.end()) {
      if (it->second.state == peer::v1::RESTORE_STATE_RESTORING) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "a restore of '" + name + "' is in progress");
      }
      if (it->second.state == peer::v1::RESTORE_STATE_UNKNOWN) {
        // Fenced (RestoreStatus): the source was told no copy runs here and
        // resumed its own; running one now would make two.
        spdlog::warn("peer: refused to restore '{}' for {}: RestoreStatus already told the source no restore of it "
                     "started here",
                     name, context->peer());
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "the source was already told no restore of '" + name +
                                "' started here (RestoreStatus) and resumed its own copy");
      }
    }
    RecordRestoreLocked(name, RestoreRecord{peer::v1::RESTORE_STATE_RESTORING, {}, {}});
  }
  // The gRPC sync server runs this handler to its end even when the caller
  // went away meanwhile (only context->IsCancelled() would tell, and the
  // restore does not look): the outcome is recorded either way, for
  // RestoreStatus.
  const std::string dir = incoming_dir_ + "/" + name;
  spdlog::info("peer: {} asks to restore {}{}", context->peer(), dir, request->lazy_pages() ? " (lazy pages)" : "");
  grpc::Status answer = grpc::Status::OK;
  PeerRestoreOptions options;
  options.resume = request->resume();
  Status s;
  if (request->lazy_pages()) {
    options.lazy_pages_fd = lazy_pages_.Take(name);
    if (options.lazy_pages_fd < 0) {
      s = Status::FailedPrecondition("no lazy-pages connection is waiting for '" + name +
                                     "' (the source opens one before it dumps; it may have expired or broken)");
    }
  }
  if (s.ok()) s = handlers_.restorer(dir, options, reply);
  if (options.lazy_pages_fd >= 0) close(options.lazy_pages_fd);  // the source's dump ends when this closes
  if (!s.ok()) {
    spdlog::warn("peer: restoring {} for {} failed: {}", dir, context->peer(), s.ToString());
    answer = ToGrpcStatus(s.WithContext("restoring " + dir + " on the destination"));
    std::lock_guard<std::mutex> lock(mu_);
    RecordRestoreLocked(name, RestoreRecord{peer::v1::RESTORE_STATE_FAILED, {}, answer.error_message()});
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    RecordRestoreLocked(name, RestoreRecord{peer::v1::RESTORE_STATE_RUNNING, *reply, {}});
  }
  if (drop_restore_replies_) {
    spdlog::warn("peer: --test-drop-restore-reply: answering UNAVAILABLE instead of the outcome of restoring '{}' "
                 "({})",
                 name, answer.ok() ? "it runs as pid " + std::to_string(reply->pid()) : answer.error_message());
    reply->Clear();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "reply dropped on purpose (--test-drop-restore-reply); ask RestoreStatus");
  }
  return answer;
}

grpc::Status PeerService::RestoreStatus(grpc::ServerContext* context, const peer::v1::RestoreStatusRequest* request,
                                        peer::v1::RestoreStatusReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  const std::string& name = request->name();
  if (std::string why = CheckImageName(name); !why.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = restores_.find(name);
    if (it == restores_.end()) {
      // Fence it: a RestoreImage of this name still on its way must not
      // start a copy once the source heard that none runs.
      RecordRestoreLocked(name, RestoreRecord{});
    } else {
      reply->set_state(it->second.state);
      if (it->second.state == peer::v1::RESTORE_STATE_RUNNING) *reply->mutable_restored() = it->second.reply;
      if (it->second.state == peer::v1::RESTORE_STATE_FAILED) reply->set_error(it->second.error);
    }
  }
  // A source polls every 200 ms while a restore runs: only answers that end
  // its polling are logged at info.
  spdlog::log(reply->state() == peer::v1::RESTORE_STATE_RESTORING ? spdlog::level::debug : spdlog::level::info,
              "peer: {} asks what became of the restore of '{}': {}", context->peer(), name,
              peer::v1::RestoreState_Name(reply->state()));
  return grpc::Status::OK;
}

void PeerService::RecordRestoreLocked(const std::string& name, RestoreRecord record) {
  const bool inserted = restores_.insert_or_assign(name, std::move(record)).second;
  if (!inserted) return;
  restore_order_.push_back(name);
  while (restore_order_.size() > kMaxRestoreRecords) {
    restores_.erase(restore_order_.front());
    restore_order_.pop_front();
  }
}

grpc::Status PeerService::Authenticate(grpc::ServerContext* context) {
  const auto& md = context->client_metadata();
  const auto it = md.find(kPeerTokenHeader);
  const std::string_view presented =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  if (it != md.end() && PeerTokenMatches(token_, presented)) return grpc::Status::OK;
  const std::string host = PeerHost(context->peer());
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (refused_hosts_.size() < kMaxRefusedHosts) first = refused_hosts_.insert(host).second;
  }
  if (first) {
    spdlog::warn("peer: refused a call from {}: {} (further refusals of this host are not logged)", host, it == md.end() ? "no peer token" : "wrong peer token");
  } else {
    spdlog::debug("peer: refused a call from {}", context->peer());
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "peer token missing or wrong (both daemons need the same --peer-token contents)");
}

grpc::Status PeerService::ReceiveImage(grpc::ServerContext* context, grpc::ServerReader<ImageChunk>* reader,
                                       peer::v1::ReceiveImageReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  const auto t0 = std::chrono::steady_clock::now();
  NextChunk next = [reader, context](ImageChunk* chunk) -> Status {
    if (reader->Read(chunk)) return Status::Ok();
    return Status::NotFound(context->IsCancelled() ? "the stream was cancelled" : "the stream ended");
  };
  grpc::Status g = Receive(next, context->peer(), reply);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g.ok()) {
    spdlog::info("peer: received {} ({} files, {} bytes) from {} in {:.2f} s ({:.0f} MB/s)", reply->path(),
                 reply->files(), reply->bytes(), context->peer(), secs, reply->bytes() / 1e6 / std::max(secs, 1e-6));
  } else {
    spdlog::warn("peer: ReceiveImage from {} failed: {}", context->peer(), g.error_message());
  }
  return g;
}

grpc::Status PeerService::OpenDataChannel(grpc::ServerContext* context, const peer::v1::OpenDataChannelRequest* request,
                                          peer::v1::OpenDataChannelReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  if (data_channels_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this phosd has no data channel; use ReceiveImage");
  }
  std::string ticket;
  if (Status s = data_channels_->IssueTicket(static_cast<int>(request->purpose()), &ticket); !s.ok()) {
    return ToGrpcStatus(s);
  }
  reply->set_port(static_cast<std::uint32_t>(data_channels_->port()));
  reply->set_ticket(ticket);
  return grpc::Status::OK;
}

void PeerService::ServeDataChannel(int fd, const std::string& peer, int purpose) {
  const auto t0 = std::chrono::steady_clock::now();
  const ReadExactFn read = SocketReader(fd);
  std::uint64_t frames = 0;
  peer::v1::DataChannelReply out;
  grpc::Status g;
  peer::v1::ReceiveImageReply received;
  if (purpose == peer::v1::DATA_CHANNEL_LAZY_PAGES) {
    ParkLazyPagesChannel(fd, peer);
    return;
  }
  if (purpose == peer::v1::DATA_CHANNEL_PRECOPY) {
    NextPrecopyChunk next = [&](peer::v1::PrecopyChunk* chunk) -> Status {
      Status s = ReadPrecopyChunk(read, chunk);
      if (s.ok()) ++frames;
      if (s.ok() && chunk->kind_case() == peer::v1::PrecopyChunk::kEnd) return Status::NotFound("end of the pre-copy");
      if (s.code() == Status::Code::kNotFound) return Status::Unavailable("the source went away (connection closed)");
      return s;
    };
    g = PrecopyFrom(next, peer, out.mutable_precopied());
  } else {
    NextChunk next = [&](ImageChunk* chunk) -> Status {
      Status s = ReadImageChunk(read, chunk);
      if (s.ok()) ++frames;
      return s;
    };
    g = Receive(next, peer, &received);
    if (g.ok()) *out.mutable_received() = received;
  }
  out.set_code(static_cast<int>(g.error_code()));
  out.set_message(g.error_message());
  if (Status w = WriteFrame(fd, out); !w.ok()) {
    spdlog::warn("peer: could not tell {} how its data channel ended: {}", peer, w.ToString());
  } else if (!g.ok()) {
    // The source may still be sending: closing with its bytes unread would
    // reset the connection and could destroy the reply before it is read.
    // Stop writing, then drain what still comes (bounded) until it closes.
    (void)shutdown(fd, SHUT_WR);
    SetReceiveTimeout(fd, 2);
    std::vector<char> sink(1 << 16);
    for (std::uint64_t drained = 0; drained < (256ull << 20);) {
      const ssize_t n = recv(fd, sink.data(), sink.size(), 0);
      if (n <= 0) break;
      drained += static_cast<std::uint64_t>(n);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g.ok() && purpose != peer::v1::DATA_CHANNEL_PRECOPY) {
    spdlog::info("peer: received {} ({} files, {} bytes) from {} over a data channel in {:.2f} s ({:.0f} MB/s)",
                 received.path(), received.files(), received.bytes(), peer, secs,
                 received.bytes() / 1e6 / std::max(secs, 1e-6));
  } else if (!g.ok()) {
    spdlog::warn("peer: data channel from {} failed after {} frames: {}", peer, frames, g.error_message());
  }
}

void PeerService::ParkLazyPagesChannel(int fd, const std::string& peer) {
  peer::v1::LazyPagesHello hello;
  Status s = ReadFrame(SocketReader(fd), &hello);
  if (s.ok()) {
    if (std::string why = CheckImageName(hello.name()); !why.empty()) s = Status::InvalidArgument(why);
  }
  if (s.ok()) {
    // The data channel server closes `fd` when this returns: the copy
    // stays open, with no timeouts (CRIU's page server and lazy-pages
    // daemon wait on it as long as the migration takes; keepalive stays).
    const int kept = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (kept < 0) {
      s = Status::FromErrno("dup of the lazy-pages connection", errno);
    } else {
      SetSocketTimeouts(kept, 0);
      s = lazy_pages_.Park(hello.name(), kept);  // closes `kept` on a refusal
    }
  }
  peer::v1::DataChannelReply out;
  const grpc::Status g = ToGrpcStatus(s);
  out.set_code(static_cast<int>(g.error_code()));
  // Never empty: a frame of 0 bytes is malformed (data_channel.h).
  out.set_message(s.ok() ? "waiting for the restore of '" + hello.name() + "'" : g.error_message());
  if (Status w = WriteFrame(fd, out); !w.ok()) {
    if (s.ok()) {
      const int parked = lazy_pages_.Take(hello.name());  // nobody will use it
      if (parked >= 0) close(parked);
    }
    spdlog::warn("peer: could not answer the lazy-pages connection from {}: {}", peer, w.ToString());
    return;
  }
  if (s.ok()) {
    spdlog::info("peer: lazy-pages connection from {} waits for the restore of '{}'", peer, hello.name());
  } else {
    spdlog::warn("peer: refused a lazy-pages connection from {}: {}", peer, s.ToString());
  }
}

grpc::Status PeerService::Receive(const NextChunk& next, const std::string& peer, peer::v1::ReceiveImageReply* reply) {
  ImageChunk chunk;
  if (Status r = next(&chunk); !r.ok()) {
    if (r.code() == Status::Code::kNotFound) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "stream ended before ImageBegin");
    }
    return ToGrpcStatus(r);
  }
  if (chunk.kind_case() != ImageChunk::kBegin) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the stream must start with ImageBegin");
  }
  const std::string name = chunk.begin().name();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!in_flight_.insert(name).second) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "a transfer of '" + name + "' is in progress");
    }
  }
  struct Release {  // the name is free again however this returns
    PeerService* self;
    std::string name;
    ~Release() {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->in_flight_.erase(name);
    }
  } release{this, name};

  ImageReceiverOptions options;
  options.incoming_dir = incoming_dir_;
  options.max_bytes = max_receive_bytes_;
  options.precopy = TakePrecopy(name);
  std::unique_ptr<ImageReceiver> receiver;
  if (Status s = ImageReceiver::Begin(options, chunk.begin(), &receiver); !s.ok()) return ToGrpcStatus(s);
  spdlog::info("peer: receiving '{}' ({} bytes, {} files{}) from {} into {}", name, chunk.begin().total_bytes(),
               chunk.begin().file_count(),
               options.precopy ? ", " + std::to_string(options.precopy->bytes()) + " bytes pre-copied" : "",
               peer, receiver->tmp_dir());

  // The destination's own refusals discard the .tmp; a source that goes
  // away leaves it (see image_receiver.h).
  Status r;
  while ((r = next(&chunk)).ok()) {
    Status s;
    switch (chunk.kind_case()) {
      case ImageChunk::kData: s = receiver->Data(chunk.data()); break;
      case ImageChunk::kFileEnd: s = receiver->FileEnd(chunk.file_end()); break;
      case ImageChunk::kEnd: {
        s = receiver->End(chunk.end(), reply);
        if (s.ok()) return grpc::Status::OK;
        break;
      }
      default: s = Status::InvalidArgument("unexpected message in the image stream"); break;
    }
    if (!s.ok()) {
      receiver->Discard();
      return ToGrpcStatus(s.WithContext("image '" + name + "'"));
    }
  }
  if (r.code() == Status::Code::kInvalidArgument) {
    // Malformed bytes from the source: refused like a bad message.
    receiver->Discard();
    return ToGrpcStatus(r.WithContext("image '" + name + "'"));
  }
  spdlog::warn("peer: the source of '{}' went away after {} bytes ({}); left {} (removed at the next start)", name,
               receiver->bytes(), r.message(), receiver->tmp_dir());
  return grpc::Status(grpc::StatusCode::CANCELLED, "stream ended before ImageEnd");
}

void PeerService::DropExpiredPrecopiesLocked() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = precopies_.begin(); it != precopies_.end();) {
    if (it->second.sealed && now - it->second.sealed_at > kPrecopyTtl) {
      spdlog::warn("peer: dropping the pre-copy of '{}' ({} bytes): no image claimed it within {} s", it->first,
                   it->second.store->bytes(), kPrecopyTtl.count());
      it = precopies_.erase(it);
    } else {
      ++it;
    }
  }
}

std::shared_ptr<PrecopyStore> PeerService::TakePrecopy(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  DropExpiredPrecopiesLocked();
  auto it = precopies_.find(name);
  if (it == precopies_.end() || !it->second.sealed) return nullptr;
  std::shared_ptr<PrecopyStore> store = std::move(it->second.store);
  precopies_.erase(it);
  return store;
}

grpc::Status PeerService::Precopy(grpc::ServerContext* context, grpc::ServerReader<peer::v1::PrecopyChunk>* reader,
                                  peer::v1::PrecopyReply* reply) {
  if (grpc::Status a = Authenticate(context); !a.ok()) return a;
  NextPrecopyChunk next = [reader, context](peer::v1::PrecopyChunk* chunk) -> Status {
    if (reader->Read(chunk)) return Status::Ok();
    if (context->IsCancelled()) return Status::Unavailable("the source went away (stream cancelled)");
    return Status::NotFound("end of the pre-copy");
  };
  return PrecopyFrom(next, context->peer(), reply);
}

grpc::Status PeerService::PrecopyFrom(const NextPrecopyChunk& next, const std::string& peer,
                                      peer::v1::PrecopyReply* reply) {
  peer::v1::PrecopyChunk chunk;
  if (Status r = next(&chunk); !r.ok()) {
    if (r.code() == Status::Code::kNotFound || r.code() == Status::Code::kUnavailable) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "stream ended before PrecopyBegin");
    }
    return ToGrpcStatus(r);
  }
  if (chunk.kind_case() != peer::v1::PrecopyChunk::kBegin) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the pre-copy stream must start with PrecopyBegin");
  }
  const std::string name = chunk.begin().name();
  if (std::string why = CheckImageName(name); !why.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why + " ('" + name + "')");
  }
  // <root>/precopy/NAME.SEQ.tmp: unique per stream, so a replaced store's
  // clean-up never meets its successor's files; phosd's start-up recovery
  // removes what a crash leaves (*.tmp under the root's subdirectories).
  std::uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = ++precopy_seq_;
  }
  const std::string root = incoming_dir_.substr(0, incoming_dir_.rfind('/'));
  std::unique_ptr<PrecopyStore> opened;
  if (Status s = PrecopyStore::Open(name, root + "/precopy/" + name + "." + std::to_string(seq) + ".tmp",
                                    max_receive_bytes_, &opened);
      !s.ok()) {
    return ToGrpcStatus(s.WithContext("pre-copy of '" + name + "'"));
  }
  std::shared_ptr<PrecopyStore> store = std::move(opened);
  {
    std::lock_guard<std::mutex> lock(mu_);
    DropExpiredPrecopiesLocked();
    auto it = precopies_.find(name);
    if (it != precopies_.end() && !it->second.sealed) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "a pre-copy of '" + name + "' is in progress");
    }
    precopies_[name] = HeldPrecopy{store, false, {}};  // replaces a sealed, unclaimed one
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status s = ReceivePrecopy(store, next);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = precopies_.find(name);
  const bool ours = it != precopies_.end() && it->second.store == store;
  if (!s.ok()) {
    if (ours) precopies_.erase(it);  // a broken pre-copy is never used
    spdlog::warn("peer: pre-copy of '{}' from {} failed: {}", name, peer, s.ToString());
    return ToGrpcStatus(s.WithContext("pre-copy of '" + name + "'"));
  }
  if (ours) {
    it->second.sealed = true;
    it->second.sealed_at = std::chrono::steady_clock::now();
  }
  reply->set_copies(store->copies());
  reply->set_bytes(store->bytes());
  spdlog::info("peer: pre-copy of '{}' from {}: {} copies, {} bytes held, {:.2f} s", name, peer,
               reply->copies(), reply->bytes(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return grpc::Status::OK;
}

Status PeerService::ReceivePrecopy(const std::shared_ptr<PrecopyStore>& store, const NextPrecopyChunk& next) {
  peer::v1::PrecopyChunk chunk;
  Status r;
  while ((r = next(&chunk)).ok()) {
    if (chunk.kind_case() != peer::v1::PrecopyChunk::kData) {
      return Status::InvalidArgument("unexpected message in the pre-copy stream");
    }
    PHOS_RETURN_IF_ERROR(store->Add(chunk.data()));
  }
  if (r.code() != Status::Code::kNotFound) return r;  // went away, or bytes that do not parse
  return store->Seal();
}

Status PeerServer::Start(const PeerServerOptions& options, const std::string& checkpoint_root,
                         PeerHandlers handlers) {
  std::string token;
  PHOS_RETURN_IF_ERROR(LoadPeerToken(options.peer_token_file, &token).WithContext("--peer-token"));
  service_ = std::make_unique<PeerService>(std::move(token), checkpoint_root, options.max_receive_bytes,
                                           std::move(handlers), options.test_drop_restore_reply);
  if (options.test_drop_restore_reply) {
    spdlog::warn("peer: --test-drop-restore-reply: every RestoreImage answers UNAVAILABLE after restoring (tests only)");
  }
  // The data channel listens on the same host as the gRPC port; a phosd
  // that cannot open one still serves ReceiveImage (sources fall back).
  data_channels_ = std::make_unique<DataChannelServer>();
  {
    PeerService* svc = service_.get();
    const std::string host = options.listen.substr(0, options.listen.rfind(':'));
    if (Status d = data_channels_->Start(
            host, [svc](int fd, const std::string& peer, int purpose) { svc->ServeDataChannel(fd, peer, purpose); });
        d.ok()) {
      service_->SetDataChannelServer(data_channels_.get());
    } else {
      spdlog::warn("peer: no data channel ({}); images stream through gRPC", d.ToString());
      data_channels_.reset();
    }
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    if (data_channels_) data_channels_->Shutdown();
    data_channels_.reset();
    service_.reset();
    port_ = 0;
    return Status::IoError("cannot listen on " + options.listen + " (--listen HOST:PORT; is the port in use?)");
  }
  spdlog::info("peer: listening on {} (port {}), images to {}/incoming, limit {} bytes; no TLS (docs/migration.md)",
               options.listen, port_, checkpoint_root, options.max_receive_bytes);
  if (data_channels_) spdlog::info("peer: data channels on port {}", data_channels_->port());
  return Status::Ok();
}

void PeerServer::Shutdown() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
  if (data_channels_) {
    data_channels_->Shutdown();  // live streams end as a vanished source's do
    data_channels_.reset();
  }
  service_.reset();
  port_ = 0;
}

}  // namespace phos::peer
