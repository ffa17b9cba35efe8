#include "peer/precopy_sender.h"

#include <algorithm>
#include <thread>

#include "common/hex.h"
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
  s->context_.AddMetadata(kPeerTokenHeader, token);
  s->writer_ = s->stub_->Precopy(&s->context_, &s->reply_);
  peer::v1::PrecopyChunk begin;
  begin.mutable_begin()->set_name(name);
  if (!s->writer_->Write(begin)) return s->StreamError();
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
}

Status PrecopySender::StreamError() {
  if (!broken_.ok()) return broken_;
  finished_ = true;
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
    d->set_data(copy.data + off, static_cast<std::size_t>(len));
    if (off == 0) {
      d->set_chunk_bytes(copy.chunk_bytes);
      for (std::uint64_t x : *copy.chunk_xxh3) d->add_chunk_xxh3(x);
    } else if (off == kChunkBytes) {
      d->clear_chunk_bytes();
      d->clear_chunk_xxh3();
    }
    if (!writer_->Write(msg)) return StreamError();
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
