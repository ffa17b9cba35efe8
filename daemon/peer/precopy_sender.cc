#include "peer/precopy_sender.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/hex.h"
#include "peer/data_channel.h"
#include "peer/peer_client.h"
#include "peer/peer_token.h"

namespace phos::peer {
namespace {
constexpr std::uint64_t kChunkBytes = 2ull << 20;  // as SendImage's FileData
constexpr int kConnectTimeoutMs = 5000;
}  // namespace

Status PrecopySender::Open(const std::string& host_port, const std::string& token, const std::string& name,
                           std::uint64_t max_bytes_per_sec, std::unique_ptr<PrecopySender>* out) {
  std::unique_ptr<PrecopySender> s(new PrecopySender());
  s->host_port_ = host_port;
  s->max_bytes_per_sec_ = max_bytes_per_sec;
  PHOS_RETURN_IF_ERROR(ConnectPeer(
      host_port, std::chrono::system_clock::now() + std::chrono::milliseconds(kConnectTimeoutMs), &s->stub_));
  Status d = OpenDataChannelTo(host_port, s->stub_.get(), token, peer::v1::DATA_CHANNEL_PRECOPY, kConnectTimeoutMs,
                               &s->data_fd_);
  if (d.code() == Status::Code::kFailedPrecondition) return d;  // the token was refused
  if (d.ok()) {
    s->stats_.transport = "data channel";
  } else {
    spdlog::warn("peer {}: {}; pre-copying '{}' through gRPC instead", host_port, d.message(), name);
    s->data_fd_ = -1;
    s->context_.AddMetadata(kPeerTokenHeader, token);
    s->writer_ = s->stub_->Precopy(&s->context_, &s->reply_);
    s->stats_.transport = "grpc";
  }
  peer::v1::PrecopyChunk begin;
  begin.mutable_begin()->set_name(name);
  if (!s->Send(begin, nullptr, 0)) return s->StreamError();
  s->t0_ = std::chrono::steady_clock::now();
  *out = std::move(s);
  return Status::Ok();
}

PrecopySender::~PrecopySender() {
  if (writer_ && !finished_) {
    // Abandoned (the checkpoint failed): the destination sees a cancelled
    // stream and drops what it holds.
    context_.TryCancel();
    (void)writer_->Finish();
  }
  // A data channel closed without PrecopyEnd: the same, for the destination.
  if (data_fd_ >= 0) close(data_fd_);
}

bool PrecopySender::Send(peer::v1::PrecopyChunk& msg, const char* raw, std::size_t raw_len) {
  if (data_fd_ < 0) {
    if (raw_len > 0) msg.mutable_data()->set_data(raw, raw_len);
    return writer_->Write(msg);
  }
  if (raw_len > 0) msg.mutable_data()->set_raw_bytes(raw_len);
  data_error_ = WriteFrame(data_fd_, msg);
  // The copy's bytes straight from the engine's staging memory.
  if (data_error_.ok() && raw_len > 0) data_error_ = WriteAll(data_fd_, raw, raw_len);
  return data_error_.ok();
}

Status PrecopySender::StreamError() {
  if (!broken_.ok()) return broken_;
  finished_ = true;
  if (data_fd_ >= 0) {
    // The destination may have refused (its reply says why) or vanished.
    (void)shutdown(data_fd_, SHUT_WR);
    peer::v1::DataChannelReply r;
    if (ReadChannelReply(data_fd_, 2, &r).ok() && r.code() != 0) {
      broken_ = PeerStatus(host_port_, grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.message()));
    } else {
      broken_ = data_error_.ok() ? Status::IoError("peer " + host_port_ + " closed the pre-copy data channel")
                                 : data_error_.WithContext("pre-copy to peer " + host_port_);
    }
    return broken_;
  }
  const grpc::Status g = writer_->Finish();
  broken_ = g.ok() ? Status::IoError("peer " + host_port_ + " closed the pre-copy stream")
                   : PeerStatus(host_port_, g);
  return broken_;
}

Status PrecopySender::Staged(const engine::StagedCopy& copy) {
  if (!broken_.ok()) return broken_;
  if (finished_) return Status::FailedPrecondition("pre-copy stream already finished");
  peer::v1::PrecopyChunk msg;
  peer::v1::PrecopyData* d = msg.mutable_data();
  for (std::uint64_t off = 0; off < copy.bytes; off += kChunkBytes) {
    const std::uint64_t len = std::min(kChunkBytes, copy.bytes - off);
    d->set_copy_id(copy.copy_id);
    d->set_address(copy.address);
    d->set_bytes(copy.bytes);
    d->set_offset(off);
    d->clear_data();
    d->clear_raw_bytes();
    if (off == 0) {
      d->set_chunk_bytes(copy.chunk_bytes);
      for (std::uint64_t x : *copy.chunk_xxh3) d->add_chunk_xxh3(x);
    } else if (off == kChunkBytes) {
      d->clear_chunk_bytes();
      d->clear_chunk_xxh3();
    }
    if (!Send(msg, reinterpret_cast<const char*>(copy.data) + off, static_cast<std::size_t>(len))) return StreamError();
    stats_.bytes += len;
    if (max_bytes_per_sec_ > 0) {
      // Sleep until the average rate is back under the cap (one chunk's time at most).
      const auto due = t0_ + std::chrono::duration<double>(static_cast<double>(stats_.bytes) /
                                                           static_cast<double>(max_bytes_per_sec_));
      std::this_thread::sleep_until(std::chrono::time_point_cast<std::chrono::steady_clock::duration>(due));
    }
  }
  ++stats_.copies;
  return Status::Ok();
}

Status PrecopySender::Finish(PrecopyStats* stats) {
  if (!broken_.ok()) return broken_;
  if (finished_) return Status::FailedPrecondition("pre-copy stream already finished");
  if (data_fd_ >= 0) {
    peer::v1::PrecopyChunk end;
    end.mutable_end();
    if (!Send(end, nullptr, 0)) return StreamError();
    finished_ = true;
    // The destination answers once it holds (and sealed) every copy.
    peer::v1::DataChannelReply r;
    if (Status rs = ReadChannelReply(data_fd_, 0, &r); !rs.ok()) {
      broken_ = Status::IoError("peer " + host_port_ + " closed the pre-copy data channel before it answered: " +
                                rs.ToString());
      return broken_;
    }
    if (r.code() != 0) {
      broken_ = PeerStatus(host_port_, grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.message()));
      return broken_;
    }
    *stats = stats_;
    return Status::Ok();
  }
  finished_ = true;
  // WritesDone may fail if the peer already ended the stream; Finish says why.
  (void)writer_->WritesDone();
  const grpc::Status g = writer_->Finish();
  if (!g.ok()) {
    broken_ = PeerStatus(host_port_, g);
    return broken_;
  }
  *stats = stats_;
  return Status::Ok();
}

}  // namespace phos::peer
