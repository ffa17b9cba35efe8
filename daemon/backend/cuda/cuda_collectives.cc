#include "backend/cuda/cuda_collectives.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/cuda/cuda_errors.h"

namespace phos::backend::cuda {
namespace {

// A poll of a non-blocking communicator sleeps this long at first, doubling
// up to kPollMax (file comment: NCCL offers no blocking wait).
constexpr auto kPollMin = std::chrono::microseconds(50);
constexpr auto kPollMax = std::chrono::milliseconds(20);

// How long a destroyed rank's ncclCommFinalize may wait for its groups
// before phosd aborts it instead: a group whose peer never posted its part
// would otherwise hold the thread that dropped the rank forever.
constexpr auto kFinalizeLimit = std::chrono::seconds(60);

ncclRedOp_t BuiltinOp(std::uint8_t redop) { return static_cast<ncclRedOp_t>(redop); }

// Drops the ranks that are gone from one id's list (CudaCollectives::mu_ held).
void DropExpired(std::vector<std::weak_ptr<CudaCommRank>>* ranks) {
  ranks->erase(std::remove_if(ranks->begin(), ranks->end(), [](const auto& w) { return w.expired(); }), ranks->end());
}

}  // namespace

// ---- CudaCommRank -------------------------------------------------------------

Status CudaCommRank::Cuda(CUresult result, std::string_view what) const {
  return CudaStatus(result, what, driver_.get());
}

Status CudaCommRank::WaitReady(const std::string& what, const std::function<bool()>& cancelled) {
  auto pause = std::chrono::duration_cast<std::chrono::microseconds>(kPollMin);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (const ncclResult_t r = nccl_->CommGetAsyncError(comm_, &state); r != ncclSuccess) {
      return Nccl(r, what + ": ncclCommGetAsyncError");
    }
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) return Nccl(state, what);
    if (aborting_.load(std::memory_order_acquire)) {
      return Status::Unavailable(what + ": the communicator was aborted");
    }
    if (cancelled && cancelled()) return Status::Unavailable(what + ": the app ended while NCCL was busy");
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, kPollMax);
  }
}

Status CudaCommRank::RunGroup(const std::vector<CollectiveOp>& ops, CUcontext session_ctx, CUstream stream) {
  if (session_ctx != session_ctx_) {
    return Status::InvalidArgument("an NCCL group on a context this rank did not join from");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ == nullptr) {
    return Status::Unavailable("NCCL rank " + std::to_string(rank_) + " was aborted: " + aborted_why_);
  }
  const CudaDriver& d = *driver_;
  // The session's stream: everything before the group happens first.
  PHOS_RETURN_IF_ERROR(Cuda(d.CtxSetCurrent(session_ctx_), "cuCtxSetCurrent (session)"));
  PHOS_RETURN_IF_ERROR(Cuda(d.EventRecord(into_, stream), "cuEventRecord (before an NCCL group)"));
  PHOS_RETURN_IF_ERROR(Cuda(d.CtxSetCurrent(primary_), "cuCtxSetCurrent (primary)"));
  PHOS_RETURN_IF_ERROR(Cuda(d.StreamWaitEvent(stream_, into_, 0), "cuStreamWaitEvent (NCCL's stream)"));

  const NcclLibrary& n = *nccl_;
  std::vector<ncclRedOp_t> made_ops;  // PreMulSum operators, destroyed once the group is issued
  Status first = Nccl(n.GroupStart(), "ncclGroupStart");
  if (!first.ok()) return first;
  for (std::size_t i = 0; i < ops.size() && first.ok(); ++i) {
    const CollectiveOp& op = ops[i];
    const auto type = static_cast<ncclDataType_t>(op.datatype);
    void* recv = reinterpret_cast<void*>(op.recv);
    const void* send = reinterpret_cast<const void*>(op.send);
    ncclRedOp_t redop = BuiltinOp(op.redop);
    if (op.redop == CollectiveOp::kPreMulSum) {
      // A host scalar is read before the call returns; a device scalar as
      // the op runs (phosd checked it lies in the session's memory).
      std::uint64_t value = op.scalar;
      void* scalar = op.scalar_on_device ? reinterpret_cast<void*>(op.scalar) : static_cast<void*>(&value);
      first = Nccl(n.RedOpCreatePreMulSum(&redop, scalar, type,
                                          op.scalar_on_device ? ncclScalarDevice : ncclScalarHostImmediate, comm_),
                   "ncclRedOpCreatePreMulSum");
      if (!first.ok()) break;
      made_ops.push_back(redop);
    }
    // The op's message is composed only when the call fails.
    ncclResult_t r = ncclSuccess;
    const char* name = "";
    switch (op.kind) {
      case CollectiveOp::Kind::kAllReduce:
        name = "ncclAllReduce";
        r = n.AllReduce(send, recv, op.count, type, redop, comm_, stream_);
        break;
      case CollectiveOp::Kind::kBroadcast:
        name = "ncclBroadcast";
        r = n.Broadcast(send, recv, op.count, type, op.peer, comm_, stream_);
        break;
      case CollectiveOp::Kind::kReduce:
        name = "ncclReduce";
        r = n.Reduce(send, recv, op.count, type, redop, op.peer, comm_, stream_);
        break;
      case CollectiveOp::Kind::kAllGather:
        name = "ncclAllGather";
        r = n.AllGather(send, recv, op.count, type, comm_, stream_);
        break;
      case CollectiveOp::Kind::kReduceScatter:
        name = "ncclReduceScatter";
        r = n.ReduceScatter(send, recv, op.count, type, redop, comm_, stream_);
        break;
      case CollectiveOp::Kind::kSend:
        name = "ncclSend";
        r = n.Send(send, op.count, type, op.peer, comm_, stream_);
        break;
      case CollectiveOp::Kind::kRecv:
        name = "ncclRecv";
        r = n.Recv(recv, op.count, type, op.peer, comm_, stream_);
        break;
    }
    if (r != ncclSuccess) first = Nccl(r, std::string(name) + " (op " + std::to_string(i) + " of the group)");
  }
  // A group once started is always ended, also after a failed op (NCCL
  // then drops the group and reports the error here too).
  const ncclResult_t ended = n.GroupEnd();
  if (first.ok() && ended != ncclSuccess && ended != ncclInProgress) first = Nccl(ended, "ncclGroupEnd");
  if (first.ok() && ended == ncclInProgress) first = WaitReady("ncclGroupEnd", nullptr);
  for (ncclRedOp_t op : made_ops) (void)n.RedOpDestroy(op, comm_);  // allowed once the call that used it returned
  if (!first.ok()) return first;

  PHOS_RETURN_IF_ERROR(Cuda(d.EventRecord(out_, stream_), "cuEventRecord (after an NCCL group)"));
  ran_group_ = true;
  PHOS_RETURN_IF_ERROR(Cuda(d.CtxSetCurrent(session_ctx_), "cuCtxSetCurrent (session)"));
  return Cuda(d.StreamWaitEvent(stream, out_, 0), "cuStreamWaitEvent (the session's stream)");
}

bool CudaCommRank::AbortHere(const std::string& why) {
  aborting_.store(true, std::memory_order_release);  // a poll under mu_ ends now
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_why_.empty()) return false;
  aborted_why_ = why.empty() ? "aborted" : why;
  if (comm_ != nullptr) {
    // Kernels of this rank in flight quit; NCCL reclaims the communicator
    // (in the background for a non-blocking one): it is not touched again.
    const ncclResult_t r = nccl_->CommAbort(comm_);
    if (r != ncclSuccess && r != ncclInProgress) {
      spdlog::warn("NCCL rank {}: ncclCommAbort: {}", rank_, NcclResultName(r));
    }
    comm_ = nullptr;
  }
  return true;
}

void CudaCommRank::Abort(const std::string& why) {
  if (!AbortHere(why)) return;
  owner_->AbortPeers(id_, this, why);
}

Status CudaCommRank::AsyncError() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_why_.empty()) return Status::Unavailable("the NCCL communicator ended: " + aborted_why_);
  if (comm_ == nullptr) return Status::Unavailable("the NCCL communicator is gone");
  ncclResult_t state = ncclSuccess;
  if (Status s = NcclStatus(nccl_->CommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", nccl_.get());
      !s.ok()) {
    return s;
  }
  if (state == ncclSuccess || state == ncclInProgress) return Status::Ok();
  return NcclStatus(state, "NCCL rank " + std::to_string(rank_), nccl_.get());
}

bool CudaCommRank::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ran_group_ || comm_ == nullptr) return true;
  if (driver_->CtxSetCurrent(primary_) != CUDA_SUCCESS) return false;
  return driver_->EventQuery(out_) == CUDA_SUCCESS;
}

CudaCommRank::~CudaCommRank() {
  owner_->Forget(id_);
  const CudaDriver& d = *driver_;
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ != nullptr) {
    // ncclCommDestroy's contract: finalize (every op of this rank done),
    // then free. A finalize that cannot end (a peer never came) is aborted.
    (void)d.CtxSetCurrent(primary_);
    const auto limit = std::chrono::steady_clock::now() + kFinalizeLimit;
    const ncclResult_t finalize = nccl_->CommFinalize(comm_);
    const bool finished =
        finalize == ncclSuccess ||
        (finalize == ncclInProgress &&
         WaitReady("ncclCommFinalize", [limit] { return std::chrono::steady_clock::now() > limit; }).ok());
    if (finished) {
      const ncclResult_t r = nccl_->CommDestroy(comm_);
      if (r != ncclSuccess && r != ncclInProgress) {
        spdlog::warn("NCCL rank {}: ncclCommDestroy: {}", rank_, NcclResultName(r));
      }
    } else {
      spdlog::warn("NCCL rank {}: its groups did not finish (a peer that never posted its part?): aborting it",
                   rank_);
      (void)nccl_->CommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (into_ != nullptr && d.CtxSetCurrent(session_ctx_) == CUDA_SUCCESS) (void)d.EventDestroy(into_);
  if (primary_ != nullptr && d.CtxSetCurrent(primary_) == CUDA_SUCCESS) {
    if (out_ != nullptr) (void)d.EventDestroy(out_);
    if (stream_ != nullptr) (void)d.StreamDestroy(stream_);
  }
  if (primary_ != nullptr) (void)d.DevicePrimaryCtxRelease(device_);
}

// ---- CudaCollectives -----------------------------------------------------------

Status CudaCollectives::Join(const CommunicatorId& id, int nranks, int rank, CUdevice device, CUcontext session_ctx,
                             const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) {
  if (nccl_ == nullptr) {
    return Status::NotSupported("NCCL collectives on the cuda backend need phosd's NCCL, which is not loaded (" +
                                unavailable_why_ + "); start phosd with --nccl-library PATH");
  }
  ncclUniqueId nccl_id{};
  PHOS_RETURN_IF_ERROR(ids_.Take(id, nranks, rank, &nccl_id));
  std::shared_ptr<CudaCommRank> r(
      new CudaCommRank(driver_, nccl_, shared_from_this(), id, nranks, rank, device, session_ctx));
  const CudaDriver& d = *driver_;
  auto fail = [&](Status s) {
    ids_.GiveBack(id, rank);
    return s;  // r's destructor releases what was made
  };
  // Everything NCCL makes goes in the primary context (file comment); it
  // must be current when the init starts, since NCCL takes the device from it.
  if (Status s = CudaStatus(d.DevicePrimaryCtxRetain(&r->primary_, device), "cuDevicePrimaryCtxRetain", &d); !s.ok()) {
    r->primary_ = nullptr;
    return fail(s);
  }
  if (Status s = CudaStatus(d.CtxSetCurrent(r->primary_), "cuCtxSetCurrent (primary)", &d); !s.ok()) return fail(s);
  if (Status s = CudaStatus(d.StreamCreateWithPriority(&r->stream_, CU_STREAM_NON_BLOCKING, 0), "cuStreamCreate", &d);
      !s.ok()) {
    return fail(s);
  }
  if (Status s = CudaStatus(d.EventCreate(&r->out_, CU_EVENT_DISABLE_TIMING), "cuEventCreate", &d); !s.ok()) {
    return fail(s);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  {
    std::lock_guard<std::mutex> lock(r->mu_);
    const ncclResult_t started = nccl_->CommInitRankConfig(&r->comm_, nranks, nccl_id, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      if (r->comm_ != nullptr) (void)nccl_->CommAbort(r->comm_);
      r->comm_ = nullptr;
      return fail(NcclStatus(started, "ncclCommInitRankConfig", nccl_.get()));
    }
    if (Status s = r->WaitReady("ncclCommInitRankConfig (waiting for every rank)", cancelled); !s.ok()) {
      (void)nccl_->CommAbort(r->comm_);
      r->comm_ = nullptr;
      return fail(s);
    }
  }
  if (Status s = CudaStatus(d.CtxSetCurrent(session_ctx), "cuCtxSetCurrent (session)", &d); !s.ok()) return fail(s);
  if (Status s = CudaStatus(d.EventCreate(&r->into_, CU_EVENT_DISABLE_TIMING), "cuEventCreate", &d); !s.ok()) {
    return fail(s);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& ranks = members_[id];
    DropExpired(&ranks);
    ranks.push_back(r);
  }
  *out = std::move(r);
  return Status::Ok();
}

void CudaCollectives::AbortPeers(const CommunicatorId& id, const CudaCommRank* from, const std::string& why) {
  std::vector<std::shared_ptr<CudaCommRank>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = members_.find(id);
    if (it == members_.end()) return;
    for (const auto& w : it->second) {
      if (auto p = w.lock(); p != nullptr && p.get() != from) peers.push_back(std::move(p));
    }
  }
  for (const auto& p : peers) p->AbortHere(why);
}

void CudaCollectives::Forget(const CommunicatorId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(id);
  if (it == members_.end()) return;
  // The rank being destroyed has expired already: this drops it.
  DropExpired(&it->second);
  if (it->second.empty()) members_.erase(it);
}

}  // namespace phos::backend::cuda
