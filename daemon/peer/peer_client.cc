#include "peer/peer_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "common/xxh3.h"
#include "peer.grpc.pb.h"
#include "peer/data_channel.h"
#include "peer/peer_token.h"

namespace phos::peer {
namespace {

namespace fs = std::filesystem;
using peer::v1::ImageChunk;

struct FileEntry {
  std::string rel;
  std::string abs;
  std::uint64_t size = 0;
  std::uint32_t mode = 0;
};

Status ListFiles(const std::string& dir, std::vector<FileEntry>* files, std::uint64_t* total) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + " is not a directory");
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return Status::IoError("list " + dir + ": " + ec.message());
  *total = 0;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return Status::IoError("list " + dir + ": " + ec.message());
    const fs::file_status st = it->symlink_status(ec);
    if (ec) return Status::IoError("stat " + it->path().string() + ": " + ec.message());
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      return Status::InvalidArgument(it->path().string() +
                                     " is not a regular file (symlinks, sockets and devices are not sent)");
    }
    FileEntry f;
    f.abs = it->path().string();
    f.rel = fs::relative(it->path(), dir, ec).generic_string();
    if (ec) return Status::IoError("relative path of " + f.abs + ": " + ec.message());
    f.size = it->file_size(ec);
    if (ec) return Status::IoError("size of " + f.abs + ": " + ec.message());
    f.mode = static_cast<std::uint32_t>(st.permissions()) & 0777;
    *total += f.size;
    files->push_back(std::move(f));
  }
  std::sort(files->begin(), files->end(), [](const FileEntry& a, const FileEntry& b) { return a.rel < b.rel; });
  return Status::Ok();
}

}  // namespace

Status ConnectPeer(const std::string& host_port, std::chrono::system_clock::time_point deadline,
                   std::unique_ptr<peer::v1::PhosPeer::Stub>* stub) {
  auto channel = grpc::CreateChannel(host_port, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(deadline)) {
    return Status::Unavailable("peer " + host_port +
                               " is not reachable (is its phosd started with `phos daemon --listen`?)");
  }
  *stub = peer::v1::PhosPeer::NewStub(channel);
  return Status::Ok();
}

Status PeerStatus(const std::string& host_port, const grpc::Status& g) {
  const std::string msg = "peer " + host_port + ": " + g.error_message();
  switch (g.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return Status::FailedPrecondition("peer " + host_port + " refused the token (UNAUTHENTICATED): " +
                                        g.error_message());
    case grpc::StatusCode::INVALID_ARGUMENT: return Status::InvalidArgument(msg);
    case grpc::StatusCode::ALREADY_EXISTS: return Status::AlreadyExists(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return Status::OutOfMemory(msg);
    case grpc::StatusCode::DATA_LOSS: return Status::Corruption(msg);
    case grpc::StatusCode::UNAVAILABLE: return Status::Unavailable(msg);
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(msg);
    default: return Status::IoError(msg + " (" + std::to_string(static_cast<int>(g.error_code())) + ")");
  }
}


namespace {

// Where SendImage's ImageChunk stream goes: gRPC's ReceiveImage, or a data
// channel (data_channel.h). The loop in SendImage is the same for both.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  /// false: the stream is over (the peer refused, or the connection broke);
  /// Fail says why.
  virtual bool Write(const ImageChunk& msg, bool last) = 0;
  /// After the last Write: the destination's answer.
  virtual Status Finish(peer::v1::ReceiveImageReply* reply) = 0;
  /// The stream is abandoned (a local error, or a Write failed): the peer's
  /// own reason when it gave one, else `local`. Nothing is committed there.
  virtual Status Fail(Status local) = 0;
};

class GrpcSink final : public ChunkSink {
 public:
  GrpcSink(std::string host_port, peer::v1::PhosPeer::Stub* stub, const std::string& token)
      : host_port_(std::move(host_port)) {
    context_.AddMetadata(kPeerTokenHeader, token);
    writer_ = stub->ReceiveImage(&context_, &reply_);
  }
  bool Write(const ImageChunk& msg, bool last) override {
    return last ? writer_->Write(msg, grpc::WriteOptions().set_last_message()) : writer_->Write(msg);
  }
  Status Finish(peer::v1::ReceiveImageReply* reply) override {
    grpc::Status g = writer_->Finish();
    if (!g.ok()) return PeerStatus(host_port_, g);
    *reply = reply_;
    return Status::Ok();
  }
  Status Fail(Status local) override {
    writer_->WritesDone();  // the destination sees no ImageEnd: nothing is committed
    grpc::Status g = writer_->Finish();
    return g.ok() ? local : PeerStatus(host_port_, g);
  }

 private:
  const std::string host_port_;
  grpc::ClientContext context_;
  peer::v1::ReceiveImageReply reply_;
  std::unique_ptr<grpc::ClientWriter<ImageChunk>> writer_;
};

class DataChannelSink final : public ChunkSink {
 public:
  DataChannelSink(std::string host_port, int fd) : host_port_(std::move(host_port)), fd_(fd) {}
  ~DataChannelSink() override { close(fd_); }
  bool Write(const ImageChunk& msg, bool /*last*/) override {
    if (msg.kind_case() == ImageChunk::kData && !msg.data().data().empty()) {
      // The header as a frame, the bytes raw after it (no copy into a message).
      ImageChunk head;
      peer::v1::FileData* d = head.mutable_data();
      d->set_path(msg.data().path());
      d->set_offset(msg.data().offset());
      d->set_raw_bytes(msg.data().data().size());
      error_ = WriteFrame(fd_, head);
      if (error_.ok()) error_ = WriteAll(fd_, msg.data().data().data(), msg.data().data().size());
    } else {
      error_ = WriteFrame(fd_, msg);
    }
    return error_.ok();
  }
  Status Finish(peer::v1::ReceiveImageReply* reply) override {
    // The destination answers after its fsyncs and renames, however long
    // they take (TCP keepalive notices a dead host meanwhile).
    peer::v1::DataChannelReply r;
    Status s = ReadChannelReply(fd_, 0, &r);
    if (!s.ok()) {
      return Status::IoError("peer " + host_port_ + " closed the data channel before it answered: " + s.ToString());
    }
    if (r.code() != 0) return PeerStatus(host_port_, grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.message()));
    *reply = r.received();
    return Status::Ok();
  }
  Status Fail(Status local) override {
    // Whatever we were sending, the destination sees the stream end without
    // ImageEnd (nothing committed); if it refused first, its reply is there.
    (void)shutdown(fd_, SHUT_WR);
    peer::v1::DataChannelReply r;
    if (ReadChannelReply(fd_, 2, &r).ok() && r.code() != 0 &&
        r.code() != static_cast<int>(grpc::StatusCode::CANCELLED)) {
      return PeerStatus(host_port_, grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.message()));
    }
    if (!local.ok()) return local;
    return error_.ok() ? Status::IoError("peer " + host_port_ + " closed the data channel") : error_;
  }

 private:
  const std::string host_port_;
  const int fd_;
  Status error_;
};

}  // namespace

Status OpenDataChannelTo(const std::string& host_port, peer::v1::PhosPeer::Stub* stub, const std::string& token,
                         peer::v1::DataChannelPurpose purpose, int connect_timeout_ms, int* fd_out) {
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(connect_timeout_ms));
  peer::v1::OpenDataChannelRequest request;
  request.set_purpose(purpose);
  peer::v1::OpenDataChannelReply reply;
  const grpc::Status g = stub->OpenDataChannel(&context, request, &reply);
  if (g.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return Status::NotSupported("peer " + host_port + " offers no data channel (" + g.error_message() + ")");
  }
  if (!g.ok()) return PeerStatus(host_port, g);
  if (reply.ticket().size() != kTicketBytes || reply.port() == 0 || reply.port() > 65535) {
    return Status::InvalidArgument("peer " + host_port + " answered OpenDataChannel with a malformed ticket or port");
  }
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(reply.port());
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Status::Unavailable("data channel: cannot resolve " + host + ": " + gai_strerror(rc));
  }
  int fd = -1;
  Status why = Status::Unavailable("data channel: no address of " + host);
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    timeval tv{};
    tv.tv_sec = connect_timeout_ms / 1000;
    tv.tv_usec = (connect_timeout_ms % 1000) * 1000;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect() too
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      why = Status::Unavailable("data channel: connect to " + host + ":" + port + ": " + std::strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return why;
  // A peer that stops reading (or answering) for a minute is gone; a dead
  // host is noticed by keepalive within ~25 s even while we wait.
  SetSocketTimeouts(fd, 60);
  const int one = 1, keepidle = 10, keepintvl = 5, keepcnt = 3;
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &keepidle, sizeof keepidle);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &keepintvl, sizeof keepintvl);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &keepcnt, sizeof keepcnt);
  std::string hello(kDataChannelMagic, sizeof kDataChannelMagic);
  hello += reply.ticket();
  if (Status s = WriteAll(fd, hello.data(), hello.size()); !s.ok()) {
    close(fd);
    return Status::Unavailable("data channel to " + host + ":" + port + ": " + s.ToString());
  }
  *fd_out = fd;
  return Status::Ok();
}

Status SendImage(const std::string& host_port, const std::string& token, const std::string& dir,
                 const std::string& name, const SendProgress& progress, SendImageResult* result,
                 const SendImageOptions& options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes > (16ull << 20)) {
    return Status::InvalidArgument("chunk size must be 1 byte to 16 MiB");
  }
  std::vector<FileEntry> files;
  std::uint64_t total = 0;
  PHOS_RETURN_IF_ERROR(ListFiles(dir, &files, &total));

  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(ConnectPeer(
      host_port, std::chrono::system_clock::now() + std::chrono::milliseconds(options.connect_timeout_ms), &stub));
  std::unique_ptr<ChunkSink> sink;
  if (options.transport != SendImageOptions::Transport::kGrpc) {
    int fd = -1;
    Status d = OpenDataChannelTo(host_port, stub.get(), token, peer::v1::DATA_CHANNEL_IMAGE,
                                 options.connect_timeout_ms, &fd);
    if (d.ok()) {
      sink = std::make_unique<DataChannelSink>(host_port, fd);
      result->transport = "data channel";
    } else if (options.transport == SendImageOptions::Transport::kDataChannel ||
               d.code() == Status::Code::kFailedPrecondition) {
      return d;  // asked for, or the token was refused (gRPC would refuse it too)
    } else {
      spdlog::warn("peer {}: {}; sending '{}' through gRPC instead", host_port, d.message(), name);
    }
  }
  if (!sink) {
    sink = std::make_unique<GrpcSink>(host_port, stub.get(), token);
    result->transport = "grpc";
  }

  ImageChunk msg;
  msg.mutable_begin()->set_name(name);
  msg.mutable_begin()->set_total_bytes(total);
  msg.mutable_begin()->set_file_count(static_cast<std::uint32_t>(files.size()));
  msg.mutable_begin()->set_skip_fsync(options.skip_fsync);
  if (!sink->Write(msg, false)) return sink->Fail(Status::IoError("peer " + host_port + " closed the stream"));
  if (progress) progress(0, total);

  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t sent = 0, streamed = 0;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> xxh(XXH3_createState(), &XXH3_freeState);
  if (!xxh) return Status::OutOfMemory("XXH3_createState");
  // One buffer for every chunk, lent to the message while it is written:
  // a message's own bytes field starts empty after Clear(), and filling it
  // would write zeros over each chunk before the read does.
  std::string chunk_bytes;
  for (const FileEntry& f : files) {
    std::vector<PrecopiedRange> refs;
    if (auto it = options.precopied.find(f.rel); it != options.precopied.end()) refs = it->second;
    std::sort(refs.begin(), refs.end(),
              [](const PrecopiedRange& a, const PrecopiedRange& b) { return a.offset < b.offset; });
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const bool overlaps = i > 0 && refs[i].offset < refs[i - 1].offset + refs[i - 1].length;
      if (refs[i].length == 0 || refs[i].offset > f.size || refs[i].length > f.size - refs[i].offset || overlaps) {
        return sink->Fail(Status::InvalidArgument("pre-copied range [" + std::to_string(refs[i].offset) + ", +" +
                                                  std::to_string(refs[i].length) + ") of " + f.rel +
                                                  " is empty, overlaps another or lies outside the file"));
      }
    }
    const int fd = open(f.abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return sink->Fail(Status::FromErrno("open " + f.abs, errno));
    XXH3_64bits_reset(xxh.get());
    std::uint64_t off = 0;
    std::size_t next_ref = 0;
    Status local;
    while (off < f.size && local.ok()) {
      msg.Clear();
      peer::v1::FileData* data = msg.mutable_data();
      data->set_path(f.rel);
      data->set_offset(off);
      std::uint64_t advance = 0;
      if (next_ref < refs.size() && refs[next_ref].offset == off) {
        const PrecopiedRange& r = refs[next_ref++];
        data->mutable_ref()->set_copy_id(r.copy_id);
        data->mutable_ref()->set_copy_offset(r.copy_offset);
        data->mutable_ref()->set_length(r.length);
        advance = r.length;
      } else {
        // Bytes up to the next pre-copied range (or the end), one chunk at most.
        const std::uint64_t stop = next_ref < refs.size() ? refs[next_ref].offset : f.size;
        std::string* buf = &chunk_bytes;
        buf->resize(static_cast<std::size_t>(std::min(options.chunk_bytes, stop - off)));
        std::size_t got = 0;
        while (got < buf->size()) {  // short reads happen
          const ssize_t n = pread(fd, buf->data() + got, buf->size() - got, static_cast<off_t>(off + got));
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) {
            local = Status::FromErrno("read " + f.abs, errno);
            break;
          }
          if (n == 0) {
            local = Status::FailedPrecondition(f.abs + " shrank while being sent (" + std::to_string(f.size) +
                                               " bytes listed); the image directory must not be written");
            break;
          }
          got += static_cast<std::size_t>(n);
        }
        if (!local.ok()) break;
        XXH3_64bits_update(xxh.get(), buf->data(), got);
        advance = got;
        streamed += got;
        data->mutable_data()->swap(chunk_bytes);
      }
      off += advance;
      sent += advance;
      if (!sink->Write(msg, false)) {
        close(fd);
        return sink->Fail(Status::IoError("peer " + host_port + " closed the stream"));
      }
      if (!msg.data().has_ref()) msg.mutable_data()->mutable_data()->swap(chunk_bytes);  // the buffer, for the next chunk
      if (progress) progress(sent, total);
      if (options.max_bytes_per_sec > 0 && !msg.data().has_ref()) {
        // Sleep until the average rate is back under the cap (bounded by one chunk's time).
        const auto due = t0 + std::chrono::duration<double>(static_cast<double>(streamed) /
                                                            static_cast<double>(options.max_bytes_per_sec));
        std::this_thread::sleep_until(std::chrono::time_point_cast<std::chrono::steady_clock::duration>(due));
      }
    }
    struct stat after {};
    if (local.ok() && (fstat(fd, &after) != 0 || static_cast<std::uint64_t>(after.st_size) != f.size)) {
      local = Status::FailedPrecondition(f.abs + " changed size while being sent (" + std::to_string(f.size) + " -> " +
                                         std::to_string(after.st_size) +
                                         " bytes); the image directory must not be written");
    }
    close(fd);
    if (!local.ok()) return sink->Fail(local);
    msg.Clear();
    peer::v1::FileEnd* end = msg.mutable_file_end();
    end->set_path(f.rel);
    end->set_size(f.size);
    end->set_xxh3(XXH3_64bits_digest(xxh.get()));
    end->set_mode(f.mode);
    if (!sink->Write(msg, false)) return sink->Fail(Status::IoError("peer " + host_port + " closed the stream"));
  }
  msg.Clear();
  msg.mutable_end()->set_file_count(static_cast<std::uint32_t>(files.size()));
  msg.mutable_end()->set_total_bytes(sent);
  if (!sink->Write(msg, true)) return sink->Fail(Status::IoError("peer " + host_port + " closed the stream"));
  peer::v1::ReceiveImageReply reply;
  PHOS_RETURN_IF_ERROR(sink->Finish(&reply));
  result->path = reply.path();
  result->bytes = reply.bytes();
  result->streamed_bytes = streamed;
  result->files = reply.files();
  return Status::Ok();
}

Status OpenLazyPagesChannel(const std::string& host_port, const std::string& token, const std::string& name,
                            int* fd_out, int connect_timeout_ms) {
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(
      ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::milliseconds(connect_timeout_ms), &stub));
  int fd = -1;
  PHOS_RETURN_IF_ERROR(OpenDataChannelTo(host_port, stub.get(), token, peer::v1::DATA_CHANNEL_LAZY_PAGES,
                                         connect_timeout_ms, &fd));
  peer::v1::LazyPagesHello hello;
  hello.set_name(name);
  peer::v1::DataChannelReply reply;
  Status s = WriteFrame(fd, hello);
  if (s.ok()) s = ReadChannelReply(fd, /*timeout_s=*/10, &reply);
  if (s.ok() && reply.code() != 0) {
    // An older phosd reads the hello as an image stream and refuses it.
    s = reply.code() == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT) ||
                reply.code() == static_cast<int>(grpc::StatusCode::CANCELLED)
            ? Status::NotSupported("peer " + host_port + " cannot take lazy pages (" + reply.message() +
                                   "; an older phosd?)")
            : PeerStatus(host_port, grpc::Status(static_cast<grpc::StatusCode>(reply.code()), reply.message()));
  }
  if (!s.ok()) {
    close(fd);
    return s.WithContext("lazy-pages connection for '" + name + "'");
  }
  // From here on CRIU's page server and lazy-pages daemon own the
  // conversation, and either may wait on it as long as the migration takes.
  SetSocketTimeouts(fd, 0);
  *fd_out = fd;
  return Status::Ok();
}

Status RestoreOnPeer(const std::string& host_port, const std::string& token,
                     const peer::v1::RestoreImageRequest& request, peer::v1::RestoreImageReply* reply,
                     bool* request_sent, int connect_timeout_ms) {
  if (request_sent != nullptr) *request_sent = false;
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(
      ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::milliseconds(connect_timeout_ms), &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  if (request_sent != nullptr) *request_sent = true;  // from here on the peer may run it
  const grpc::Status g = stub->RestoreImage(&context, request, reply);
  if (!g.ok()) return PeerStatus(host_port, g);
  return Status::Ok();
}

Status RestoreStatusOnPeer(const std::string& host_port, const std::string& token, const std::string& name,
                           peer::v1::RestoreStatusReply* reply, int timeout_ms) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(ConnectPeer(host_port, deadline, &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  context.set_deadline(deadline);
  peer::v1::RestoreStatusRequest request;
  request.set_name(name);
  const grpc::Status g = stub->RestoreStatus(&context, request, reply);
  if (g.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return Status::NotSupported("peer " + host_port + " cannot report restore outcomes (RestoreStatus: " +
                                g.error_message() + "; an older phosd?)");
  }
  if (!g.ok()) return PeerStatus(host_port, g);
  return Status::Ok();
}

Status PingPeer(const std::string& host_port, const std::string& token, int connect_timeout_ms) {
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(
      ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::milliseconds(connect_timeout_ms), &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(connect_timeout_ms));
  peer::v1::PingRequest request;
  peer::v1::PingReply reply;
  const grpc::Status g = stub->Ping(&context, request, &reply);
  if (!g.ok()) return PeerStatus(host_port, g);
  return Status::Ok();
}

}  // namespace phos::peer

namespace phos::peer {

Status RequestJoinCut(const std::string& host_port, const std::string& token, const std::string& cut,
                      int timeout_ms) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(ConnectPeer(host_port, deadline, &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  context.set_deadline(deadline);
  peer::v1::JoinCutRequest request;
  request.set_cut(cut);
  peer::v1::JoinCutReply reply;
  const grpc::Status g = stub->JoinCut(&context, request, &reply);
  if (!g.ok()) return PeerStatus(host_port, g);
  return Status::Ok();
}

}  // namespace phos::peer

namespace phos::peer {

Status RequestRestoreJobRanks(const std::string& host_port, const std::string& token, const std::string& dir,
                              const std::vector<std::string>& rank_dirs, const std::vector<pid_t>& pids,
                              std::uint64_t generation, const std::function<bool()>& give_up,
                              std::vector<int>* pids_out, const std::string& job_name) {
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::seconds(5), &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  peer::v1::RestoreJobRanksRequest request;
  request.set_dir(dir);
  for (const std::string& d : rank_dirs) request.add_rank_dirs(d);
  for (pid_t p : pids) request.add_pids(p);
  request.set_generation(generation);
  request.set_job_name(job_name);
  peer::v1::RestoreJobRanksReply reply;
  // The call blocks until the peer's ranks formed their communicators,
  // which needs ours: a watcher cancels it when this side gives up.
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    while (!finished.load()) {
      if (give_up && give_up()) {
        context.TryCancel();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const grpc::Status g = stub->RestoreJobRanks(&context, request, &reply);
  finished.store(true);
  watcher.join();
  if (!g.ok()) return PeerStatus(host_port, g);
  pids_out->assign(reply.pids().begin(), reply.pids().end());
  return Status::Ok();
}

Status RequestMoveJobPart(const std::string& host_port, const std::string& token,
                          const peer::v1::MoveJobPartRequest& request, peer::v1::MoveJobPartReply* reply) {
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::seconds(5), &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  const grpc::Status g = stub->MoveJobPart(&context, request, reply);
  if (!g.ok()) return PeerStatus(host_port, g);
  return Status::Ok();
}

}  // namespace phos::peer
