// NCCL through phosd (rows kNcclCommInitRank .. kNcclGroup in
// interposer/protocol/calls.def; docs/interposer.md "NCCL").
//
// The session holds its ranks (st.comms: the app's communicator id -> the
// backend's CommRank). A group of ops is checked here — kinds, types,
// operators, ranks, and every buffer inside this session's memory with the
// extents protocol/nccl_wire.h gives — and enqueued on the frame's stream;
// its access set is its send buffers read and receive buffers written.
// Errors of a group as it runs (a peer died, the ranks disagree) are the
// communicator's async error (kNcclCommGetAsyncError), as in NCCL.
#include <spdlog/spdlog.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "session/access_spec.h"
#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

namespace {

constexpr size_t kMaxCommunicators = 4096;

Status FindComm(SessionState& st, uint32_t id, std::shared_ptr<backend::CommRank>* out) {
  auto it = st.comms.find(id);
  if (it == st.comms.end()) return Status::NotFound("no NCCL communicator " + std::to_string(id) + " in this process");
  *out = it->second.rank;
  return Status::Ok();
}

/// The session no longer holds communicator `id` (destroyed, aborted).
void Forget(SessionState& st, uint32_t id) {
  auto it = st.comms.find(id);
  if (it == st.comms.end()) return;
  if (st.comm_book != nullptr) st.comm_book->Leave(it->second.unique_id, it->second.rank->rank(), st.session_id);
  st.comms.erase(it);
}

int64_t NcclResultOf(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk: return wire::kNcclSuccess;
    case Status::Code::kUnavailable: return wire::kNcclRemoteError;
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotSupported: return wire::kNcclInvalidUsage;
    default: return wire::kNcclInternalError;
  }
}

}  // namespace

void HandleNcclCommInitRank(SessionState& st, const CallContext& call, const wire::NcclInitRequest& req,
                            Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "ncclCommInitRank"); !h.ok()) return out->Fail(h);
  if (req.comm == 0 || st.comms.count(req.comm) != 0) {
    return out->Fail(WireStatus::kInvalidValue, "NCCL communicator id " + std::to_string(req.comm) + " is in use");
  }
  if (st.comms.size() >= kMaxCommunicators) {
    return out->Fail(WireStatus::kMemoryAllocation, "this process holds " + std::to_string(st.comms.size()) +
                                                         " NCCL communicators, the most phos keeps for one");
  }
  if (req.nranks < 1 || req.nranks > wire::kMaxNcclRanks || req.rank < 0 || req.rank >= req.nranks) {
    return out->Fail(WireStatus::kInvalidValue, "ncclCommInitRank: rank " + std::to_string(req.rank) + " of " +
                                                    std::to_string(req.nranks) + " (phos forms communicators of 1 to " +
                                                    std::to_string(wire::kMaxNcclRanks) + " ranks)");
  }
  backend::CommunicatorId id{};
  std::memcpy(id.data(), req.unique_id, id.size());
  if (Status s = JoinCommunicator(st, req.comm, id, req.nranks, req.rank); !s.ok()) {
    return out->Fail(s.WithContext("ncclCommInitRank"));
  }
  spdlog::info("session {}: rank {} of a {}-rank NCCL communicator on GPU {}", st.session_id, req.rank, req.nranks,
               st.device);
}

void HandleNcclCommFinalize(SessionState& st, const CallContext& call, const wire::HandleRequest& req,
                            Outcome* out) {
  std::shared_ptr<backend::CommRank> rank;
  if (Status s = FindComm(st, req.id, &rank); !s.ok()) return out->Fail(s);
  // Every op the app issued has run once the context is idle.
  out->Fail(SyncResult(st, st.ctx->Synchronize()));
}

void HandleNcclCommDestroy(SessionState& st, const CallContext& call, const wire::HandleRequest& req,
                           Outcome* out) {
  std::shared_ptr<backend::CommRank> rank;
  if (Status s = FindComm(st, req.id, &rank); !s.ok()) return out->Fail(s);
  // Groups still queued hold the rank themselves and run to the end.
  Forget(st, req.id);
}

void HandleNcclCommAbort(SessionState& st, const CallContext& call, const wire::HandleRequest& req, Outcome* out) {
  std::shared_ptr<backend::CommRank> rank;
  if (Status s = FindComm(st, req.id, &rank); !s.ok()) return out->Fail(s);
  rank->Abort("rank " + std::to_string(rank->rank()) + " called ncclCommAbort");
  Forget(st, req.id);
}

void HandleNcclCommGetAsyncError(SessionState& st, const CallContext& call, const wire::HandleRequest& req,
                                 Outcome* out) {
  std::shared_ptr<backend::CommRank> rank;
  if (Status s = FindComm(st, req.id, &rank); !s.ok()) return out->Fail(s);
  const Status e = rank->AsyncError();
  if (!e.ok()) spdlog::debug("session {}: NCCL rank {}: {}", st.session_id, rank->rank(), e.ToString());
  out->Set(wire::ValueReply{NcclResultOf(e)});
}

void HandleNcclGroup(SessionState& st, const CallContext& call, const wire::NcclGroupRequest& req, Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "an NCCL group"); !h.ok()) return out->Fail(h);
  if (req.op_count == 0 || req.op_count > wire::kMaxNcclGroupOps ||
      call.tail.size() != static_cast<size_t>(req.op_count) * sizeof(wire::NcclOp)) {
    return out->Fail(WireStatus::kInvalidValue, "an NCCL group of " + std::to_string(req.op_count) + " ops with " +
                                                     std::to_string(call.tail.size()) + " bytes of ops (at most " +
                                                     std::to_string(wire::kMaxNcclGroupOps) + " ops)");
  }
  std::shared_ptr<backend::CommRank> rank;
  if (Status s = FindComm(st, req.comm, &rank); !s.ok()) return out->Fail(s);
  if (Status e = rank->AsyncError(); !e.ok()) {
    return out->Fail(WireStatus::kInvalidValue, "the NCCL communicator has failed: " + e.message());
  }
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, call.rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, call, stream, false);
  std::vector<backend::CollectiveOp> ops(req.op_count);
  for (uint32_t i = 0; i < req.op_count; ++i) {
    wire::NcclOp w;
    std::memcpy(&w, call.tail.data() + i * sizeof w, sizeof w);
    uint64_t send_bytes = 0, recv_bytes = 0;
    const std::string what = std::string("NCCL ") + wire::NcclKindName(w.kind) + " (op " + std::to_string(i) +
                              " of the group)";
    if (const char* why = wire::CheckNcclOp(w, rank->nranks(), rank->rank(), &send_bytes, &recv_bytes);
        why != nullptr) {
      return out->Fail(WireStatus::kInvalidValue, what + ": " + why);
    }
    const bool device_scalar = wire::NcclDeviceScalar(w);
    const std::pair<uint64_t, uint64_t> ranges[] = {
        {w.send, send_bytes}, {w.recv, recv_bytes}, {device_scalar ? w.scalar_value : 0, wire::NcclTypeBytes(w.datatype)}};
    for (const auto& [ptr, bytes] : ranges) {
      if (ptr == 0 || bytes == 0) continue;
      if (Status s = CheckDeviceRange(st, ptr, bytes); !s.ok()) {
        return out->Fail(Status(s.code(), what + ": " + s.message()));
      }
    }
    if (send_bytes != 0) AddOperand(&v, 0, w.send, send_bytes);
    if (device_scalar) AddOperand(&v, 0, w.scalar_value, wire::NcclTypeBytes(w.datatype));
    if (recv_bytes != 0) AddOperand(&v, 1, w.recv, recv_bytes);
    backend::CollectiveOp& op = ops[i];
    op.kind = static_cast<backend::CollectiveOp::Kind>(w.kind);
    op.datatype = w.datatype;
    op.redop = w.redop;
    op.scalar_on_device = device_scalar;
    op.scalar = w.scalar_value;
    op.peer = w.peer;
    op.send = w.send;
    op.recv = w.recv;
    op.count = w.count;
  }
  // A rank's sends to itself are received in the same group, or never:
  // its stream would wait for itself (NCCL hangs; phos refuses).
  uint64_t self_sent = 0, self_received = 0;
  for (const backend::CollectiveOp& op : ops) {
    if (op.peer != rank->rank()) continue;
    if (op.kind == backend::CollectiveOp::Kind::kSend) self_sent += op.count * wire::NcclTypeBytes(op.datatype) + 1;
    if (op.kind == backend::CollectiveOp::Kind::kRecv) self_received += op.count * wire::NcclTypeBytes(op.datatype) + 1;
  }
  if (self_sent != self_received) {
    return out->Fail(WireStatus::kInvalidValue,
                     "NCCL: a rank's Send to itself and its Recv from itself must be in one group, with equal sizes");
  }
  Status s = st.executor->Run(v, [&] { return st.ctx->EnqueueCollectives(rank, ops, stream); });
  if (s.ok() && st.comm_book != nullptr) {
    GroupCounts counts;
    for (const backend::CollectiveOp& op : ops) {
      if (op.kind == backend::CollectiveOp::Kind::kSend) {
        ++counts.sent[op.peer];
      } else if (op.kind == backend::CollectiveOp::Kind::kRecv) {
        ++counts.received[op.peer];
      } else {
        ++counts.collectives;
      }
    }
    st.comm_book->Count(st.comms.at(req.comm).unique_id, rank->rank(), st.session_id, counts);
  }
  out->Fail(s);
}

Status JoinCommunicator(SessionState& st, uint32_t app_id, const backend::CommunicatorId& unique_id, int nranks,
                        int rank) {
  const std::atomic<bool>* stop = st.stopping;
  std::shared_ptr<backend::CommRank> joined;
  // Blocks (this session's consumer thread, as NCCL blocks the app's
  // thread) until every rank joined or this app ended.
  PHOS_RETURN_IF_ERROR(st.ctx->JoinCommunicator(
      unique_id, nranks, rank, [stop] { return stop != nullptr && stop->load(std::memory_order_acquire); },
      &joined));
  st.comms[app_id] = SessionState::Communicator{std::move(joined), unique_id};
  if (st.comm_book != nullptr) st.comm_book->Join(unique_id, nranks, rank, st.session_id);
  return Status::Ok();
}

/// Ends the session's ranks: the peers' waits fail (ncclRemoteError)
/// instead of hanging on a process that is gone (ReleaseAll).
void AbortCommunicators(SessionState& st, const std::string& why) {
  for (auto& [id, c] : st.comms) {
    c.rank->Abort("rank " + std::to_string(c.rank->rank()) + ": " + why);
    if (st.comm_book != nullptr) st.comm_book->Leave(c.unique_id, c.rank->rank(), st.session_id);
  }
  st.comms.clear();
}

}  // namespace phos::session
