#include "peer/peer_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <xxhash.h>

#include "peer.grpc.pb.h"
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
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  peer::v1::ReceiveImageReply reply;
  std::unique_ptr<grpc::ClientWriter<ImageChunk>> writer = stub->ReceiveImage(&context, &reply);

  // A failed Write means the stream is over (the peer refused, or the
  // connection broke): Finish() says why.
  auto finish_error = [&](Status local) -> Status {
    grpc::Status g = writer->Finish();
    return g.ok() ? local : PeerStatus(host_port, g);
  };

  ImageChunk msg;
  msg.mutable_begin()->set_name(name);
  msg.mutable_begin()->set_total_bytes(total);
  msg.mutable_begin()->set_file_count(static_cast<std::uint32_t>(files.size()));
  msg.mutable_begin()->set_skip_fsync(options.skip_fsync);
  if (!writer->Write(msg)) return finish_error(Status::IoError("peer " + host_port + " closed the stream"));
  if (progress) progress(0, total);

  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t sent = 0, streamed = 0;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> xxh(XXH3_createState(), &XXH3_freeState);
  if (!xxh) return Status::OutOfMemory("XXH3_createState");
  for (const FileEntry& f : files) {
    std::vector<PrecopiedRange> refs;
    if (auto it = options.precopied.find(f.rel); it != options.precopied.end()) refs = it->second;
    std::sort(refs.begin(), refs.end(),
              [](const PrecopiedRange& a, const PrecopiedRange& b) { return a.offset < b.offset; });
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const bool overlaps = i > 0 && refs[i].offset < refs[i - 1].offset + refs[i - 1].length;
      if (refs[i].length == 0 || refs[i].offset > f.size || refs[i].length > f.size - refs[i].offset || overlaps) {
        writer->WritesDone();
        return finish_error(Status::InvalidArgument("pre-copied range [" + std::to_string(refs[i].offset) + ", +" +
                                                    std::to_string(refs[i].length) + ") of " + f.rel +
                                                    " is empty, overlaps another or lies outside the file"));
      }
    }
    const int fd = open(f.abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      writer->WritesDone();  // the destination sees no ImageEnd: nothing is committed
      return finish_error(Status::FromErrno("open " + f.abs, errno));
    }
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
        std::string* buf = data->mutable_data();
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
      }
      off += advance;
      sent += advance;
      if (!writer->Write(msg)) {
        close(fd);
        return finish_error(Status::IoError("peer " + host_port + " closed the stream"));
      }
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
    if (!local.ok()) {
      writer->WritesDone();
      return finish_error(local);
    }
    msg.Clear();
    peer::v1::FileEnd* end = msg.mutable_file_end();
    end->set_path(f.rel);
    end->set_size(f.size);
    end->set_xxh3(XXH3_64bits_digest(xxh.get()));
    end->set_mode(f.mode);
    if (!writer->Write(msg)) return finish_error(Status::IoError("peer " + host_port + " closed the stream"));
  }
  msg.Clear();
  msg.mutable_end()->set_file_count(static_cast<std::uint32_t>(files.size()));
  msg.mutable_end()->set_total_bytes(sent);
  if (!writer->Write(msg, grpc::WriteOptions().set_last_message())) {
    return finish_error(Status::IoError("peer " + host_port + " closed the stream"));
  }
  grpc::Status g = writer->Finish();
  if (!g.ok()) return PeerStatus(host_port, g);
  result->path = reply.path();
  result->bytes = reply.bytes();
  result->streamed_bytes = streamed;
  result->files = reply.files();
  return Status::Ok();
}

Status RestoreOnPeer(const std::string& host_port, const std::string& token, const std::string& name, bool resume,
                     peer::v1::RestoreImageReply* reply, bool* request_sent, int connect_timeout_ms) {
  if (request_sent != nullptr) *request_sent = false;
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(
      ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::milliseconds(connect_timeout_ms), &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  peer::v1::RestoreImageRequest request;
  request.set_name(name);
  request.set_resume(resume);
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
                              std::vector<int>* pids_out) {
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(ConnectPeer(host_port, std::chrono::system_clock::now() + std::chrono::seconds(5), &stub));
  grpc::ClientContext context;
  context.AddMetadata(kPeerTokenHeader, token);
  peer::v1::RestoreJobRanksRequest request;
  request.set_dir(dir);
  for (const std::string& d : rank_dirs) request.add_rank_dirs(d);
  for (pid_t p : pids) request.add_pids(p);
  request.set_generation(generation);
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

}  // namespace phos::peer
