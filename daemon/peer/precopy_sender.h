// PrecopySender: the source side of PhosPeer.Precopy — the engine's
// PrecopySink for a live migration (engine/precopy_sink.h,
// docs/migration.md "Pre-copy streaming"). Every buffer copy a recopy round
// stages goes to the destination daemon at once, over one stream, while
// the app keeps running: a data channel (data_channel.h: the copy's bytes
// raw on a TCP connection, sent straight from the staging memory) when the
// peer offers one, else gRPC's Precopy stream.
//
//   Open()    connects and sends PrecopyBegin (before the checkpoint starts)
//   Staged()  the copier's thread: the copy in 2 MiB PrecopyData chunks,
//             throttled to max_bytes_per_sec; a refused write fails the
//             checkpoint (the app runs on)
//   Finish()  after t2: ends the stream and waits for the destination to
//             confirm it holds every copy (sealed)
// Dropped without Finish, the stream is cancelled and the destination
// forgets the copies.
//
// Threading: Staged() is called by one thread at a time (the copier);
// Open/Finish by the migration's thread before/after the checkpoint, so no
// call overlaps another and the object needs no lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "engine/precopy_sink.h"
#include "peer.grpc.pb.h"

namespace phos::peer {

struct PrecopyStats {
  std::uint64_t copies = 0;   // handed over by the engine
  std::uint64_t bytes = 0;    // sent
  std::string transport;      // "data channel" or "grpc"
};

class PrecopySender final : public engine::PrecopySink {
 public:
  static Status Open(const std::string& host_port, const std::string& token, const std::string& name,
                     std::uint64_t max_bytes_per_sec, std::unique_ptr<PrecopySender>* out);
  ~PrecopySender() override;

  Status Staged(const engine::StagedCopy& copy) override;
  Status Finish(PrecopyStats* stats);

 private:
  PrecopySender() = default;
  /// Write failed: the stream is over; Finish() says why.
  Status StreamError();
  /// Sends one message (and, for a PrecopyData, `raw` after it on a data
  /// channel; over gRPC `raw` goes inside it). false: the stream broke.
  bool Send(peer::v1::PrecopyChunk& msg, const char* raw, std::size_t raw_len);

  std::string host_port_;
  std::uint64_t max_bytes_per_sec_ = 0;
  std::unique_ptr<peer::v1::PhosPeer::Stub> stub_;
  grpc::ClientContext context_;
  peer::v1::PrecopyReply reply_;
  std::unique_ptr<grpc::ClientWriter<peer::v1::PrecopyChunk>> writer_;  // gRPC, or
  int data_fd_ = -1;                                                    // a data channel
  Status data_error_;  // the data channel's first failure
  bool finished_ = false;
  Status broken_;  // the first failure; later calls repeat it
  std::chrono::steady_clock::time_point t0_;
  PrecopyStats stats_;
};

}  // namespace phos::peer
