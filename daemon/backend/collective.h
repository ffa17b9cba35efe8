// The collectives a backend runs for NCCL (Context::JoinCommunicator,
// Context::EnqueueCollectives; docs/backends.md "Collectives").
//
// phosd checks every op (protocol/nccl_wire.h: kinds, types, operators,
// extents inside the session's buffers) before a backend sees it; a backend
// only executes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace phos::backend {

/// ncclUniqueId's 128 bytes: what names a communicator to all its ranks.
using CommunicatorId = std::array<std::uint8_t, 128>;

/// One op of a group, as phosd decoded and checked it.
struct CollectiveOp {
  enum class Kind : std::uint8_t { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSend, kRecv };
  Kind kind = Kind::kAllReduce;
  std::uint8_t datatype = 0;  // ncclDataType_t
  std::uint8_t redop = 0;     // ncclRedOp_t built-in (ncclSum .. ncclAvg), or kPreMulSum
  static constexpr std::uint8_t kPreMulSum = 0xff;
  bool scalar_on_device = false;  // PreMulSum: the scalar is read from device memory as the op runs
  std::uint64_t scalar = 0;       // PreMulSum: the scalar's bytes (host) or its device address
  int peer = 0;                   // root (Broadcast, Reduce) or peer (Send, Recv)
  std::uint64_t send = 0;         // device addresses
  std::uint64_t recv = 0;
  std::uint64_t count = 0;        // elements, as the NCCL call names them
};

/// One rank's membership of a communicator. Thread-safe.
class CommRank {
 public:
  virtual ~CommRank() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  /// Ends the communicator for every rank: ops waiting for a peer give up
  /// (every rank's AsyncError becomes Unavailable naming `why`: NCCL's
  /// ncclRemoteError), later ops fail at once. Idempotent.
  virtual void Abort(const std::string& why) = 0;
  /// The first error an op of this rank met as it ran (OK if none).
  virtual Status AsyncError() const = 0;
  /// Ops of this rank enqueued and not yet run (ncclCommFinalize waits for 0).
  virtual bool Idle() const = 0;
};

/// What the phosds of a communicator whose ranks are on several of them
/// tell each other (docs/backends.md "Collectives across phosds"). The
/// receiving phosd checks it against the communicator before using it: a
/// peer is authenticated (the peer token) but its bytes are not trusted.
struct FabricMessage {
  enum class Kind : std::uint8_t {
    kCollective,  // rank `from_rank`'s part of collective #seq: its op and its send bytes
    kSend,        // rank `from_rank`'s Send to `to_rank`: the bytes
    kAbort,       // the communicator ended on the sender's side: `why`
  };
  Kind kind = Kind::kCollective;
  CommunicatorId comm{};
  int nranks = 0;
  int from_rank = 0;
  int to_rank = 0;          // kSend
  std::uint64_t seq = 0;    // kCollective
  CollectiveOp op;          // kCollective, kSend; send/recv are the sender's addresses (not used);
                            // a PreMulSum's scalar always travels by value (scalar_on_device false)
  std::vector<std::uint8_t> data;  // the op's send bytes
  std::string why;          // kAbort
};

/// How a backend reaches the ranks of its communicators on other phosds
/// (implemented by daemon/cluster/ over etcd and the peer plane). Only set
/// when phosd runs with --etcd. Thread-safe.
class CollectiveFabric {
 public:
  virtual ~CollectiveFabric() = default;
  /// Records that rank `rank` of `comm` joined on this phosd, then blocks
  /// until all `nranks` ranks joined somewhere (or `cancelled()`, or the
  /// ranks disagree on the size). `where[r]`: the peer endpoint of rank r's
  /// phosd, "" for this phosd.
  virtual Status Rendezvous(const CommunicatorId& comm, int nranks, int rank, const std::function<bool()>& cancelled,
                            std::vector<std::string>* where) = 0;
  /// Delivers `message` to the phosd at `endpoint`; returns once that phosd
  /// took it (or why it could not).
  virtual Status Send(const std::string& endpoint, const FabricMessage& message) = 0;
  /// Rank `rank` of `comm` on this phosd is gone (destroyed, aborted).
  virtual void Leave(const CommunicatorId& comm, int rank) = 0;
};

}  // namespace phos::backend
