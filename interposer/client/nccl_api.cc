// NCCL in libphos.so (docs/interposer.md "NCCL"): the app's communicators
// and groups, forwarded to phosd, which runs them with the backend's
// collectives (the sim: daemon/backend/sim/sim_collectives.h).
//
// A communicator handle is a struct ncclComm of this file: phosd's id for
// it, its size, the caller's rank and GPU. Groups are per thread, as in
// NCCL: between ncclGroupStart and the outermost ncclGroupEnd ops are
// collected, then sent as one kNcclGroup per (communicator, stream) in the
// order they were first named; outside a group each op is a group of one.
// Ops are called, not posted, so NCCL's argument errors come back at once;
// what fails as the group runs is the communicator's async error.
//
// Not offered (the generated stubs answer ncclInvalidUsage and log the name
// once): ncclGroupSimulateEnd, ncclCommRevoke. ncclCommSplit,
// ncclCommShrink, ncclCommInitRankScalable, ncclAlltoAll, ncclGather and
// ncclScatter are made here from the others; buffer and window
// registration are checked and remembered here (phosd needs nothing from
// them). ncclCommInitAll is offered for one GPU (a process under phos uses
// one, devices.h).
#include <nccl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/devices.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"

// The opaque type nccl.h names (ncclComm_t is a pointer to it).
struct ncclComm {
  uint32_t id = 0;  // phosd's name for it (kNcclCommInitRank's comm)
  int nranks = 0;
  int rank = 0;
  int device = 0;  // the app's ordinal of the GPU it was made on
  ncclUniqueId unique_id{};  // what it was formed from (ncclCommSplit derives its children's)
  uint64_t splits = 0;       // ncclCommSplit calls so far (the same on every rank: a collective)
  uint64_t shrinks = 0;      // ncclCommShrink calls so far (the same on every rank that makes them)
};

namespace phos::client {
namespace {

namespace op = wire::op;
using wire::WireStatus;

std::atomic<uint32_t> g_next_comm{1};

// The last error's text, for ncclGetLastError (NCCL keeps one per process).
std::mutex g_last_error_mu;
std::string g_last_error;  // guarded by g_last_error_mu

void NoteError(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_last_error_mu);
  g_last_error = text;
}

// Operators made by ncclRedOpCreatePreMulSum (op value -> its scalar).
struct PreMulSum {
  ncclDataType_t datatype = ncclFloat32;
  bool on_device = false;
  uint64_t scalar = 0;  // the bytes (host) or the address (device)
  ncclComm_t comm = nullptr;
};
std::mutex g_ops_mu;
std::unordered_map<int, PreMulSum> g_ops;  // guarded by g_ops_mu
int g_next_op = ncclNumOps;                // guarded by g_ops_mu

// This thread's group (NCCL's groups are per thread).
struct PendingOp {
  ncclComm_t comm;
  uint32_t stream;
  wire::NcclOp op;
};
thread_local int t_group_depth = 0;
thread_local std::vector<PendingOp> t_group;
thread_local ncclResult_t t_group_error = ncclSuccess;

ncclResult_t FromWire(WireStatus w) {
  switch (w) {
    case WireStatus::kSuccess: return ncclSuccess;
    case WireStatus::kInvalidValue:
    case WireStatus::kInvalidResourceHandle:
    case WireStatus::kIllegalAddress: return ncclInvalidArgument;
    case WireStatus::kNotSupported:
    case WireStatus::kInvalidDevice: return ncclInvalidUsage;
    case WireStatus::kDaemonUnavailable: return ncclSystemError;
    default: return ncclInternalError;
  }
}

ncclResult_t Handle(ncclComm_t comm, uint32_t wire_op) {
  const wire::HandleRequest req{comm->id, 0};
  WireStatus w = Connection::Get().Call(static_cast<wire::ApiId>(wire_op), 0, std::as_bytes(std::span(&req, 1)), nullptr);
  if (w != WireStatus::kSuccess) NoteError("phosd refused the call (cuda error " + std::to_string(static_cast<int>(w)) + ")");
  return FromWire(w);
}

ncclResult_t AsyncErrorOf(ncclComm_t comm, ncclResult_t* out) {
  const wire::HandleRequest req{comm->id, 0};
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kNcclCommGetAsyncError, 0, std::as_bytes(std::span(&req, 1)), &r);
  if (w != WireStatus::kSuccess) return FromWire(w);
  wire::ValueReply v{};
  if (r.bytes != sizeof v) return ncclInternalError;
  std::memcpy(&v, r.data.data(), sizeof v);
  *out = static_cast<ncclResult_t>(v.value);
  return ncclSuccess;
}

// Sends one group of `comm`'s ops on `stream`.
ncclResult_t SendGroup(ncclComm_t comm, uint32_t stream, const std::vector<wire::NcclOp>& ops) {
  if (ops.size() > wire::kMaxNcclGroupOps) {
    NoteError("a group of " + std::to_string(ops.size()) + " ops on one communicator and stream; phos takes " +
              std::to_string(wire::kMaxNcclGroupOps));
    return ncclInvalidUsage;
  }
  const wire::NcclGroupRequest head{comm->id, static_cast<uint32_t>(ops.size())};
  std::vector<std::byte> payload(sizeof head + ops.size() * sizeof(wire::NcclOp));
  std::memcpy(payload.data(), &head, sizeof head);
  std::memcpy(payload.data() + sizeof head, ops.data(), ops.size() * sizeof(wire::NcclOp));
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kNcclGroup, stream, payload, &r);
  if (w == WireStatus::kSuccess) return ncclSuccess;
  NoteError(std::string(reinterpret_cast<const char*>(r.data.data()), r.bytes));
  ncclResult_t async = ncclSuccess;
  if (AsyncErrorOf(comm, &async) == ncclSuccess && async != ncclSuccess) return async;
  return FromWire(w);
}

// A group of `comm`'s ops as a graph node replays it (NCCL inside a CUDA
// graph capture, docs/interposer.md "NCCL"): at each launch of the graph
// the group is sent again, on the launch stream, as the ordinary call it
// would have been — so phosd and every checkpoint protocol see one more
// collective, in the order the graph gives. A failure is the graph
// launch's cudaErrorLaunchFailure; NCCL's own error stays readable with
// ncclCommGetAsyncError / ncclGetLastError.
StreamOp ReplayGroup(ncclComm_t comm, std::vector<wire::NcclOp> ops) {
  return [comm, ops = std::move(ops)](uint32_t stream_id) {
    return SendGroup(comm, stream_id, ops) == ncclSuccess ? cudaSuccess : cudaErrorLaunchFailure;
  };
}

// If `stream_id` is being captured: the group becomes a node of its graph
// (true, *result the capture's answer). Else false: the caller sends it.
bool CaptureGroup(ncclComm_t comm, uint32_t stream_id, const std::vector<wire::NcclOp>& ops, ncclResult_t* result) {
  cudaError_t e = cudaSuccess;
  if (!MaybeCapture(stream_id, cudaGraphNodeTypeKernel, ReplayGroup(comm, ops), &e)) return false;
  if (e != cudaSuccess) NoteError(std::string("capturing an NCCL call: ") + cudaGetErrorString(e));
  *result = e == cudaSuccess ? ncclSuccess : ncclInvalidUsage;
  return true;
}

ncclResult_t Flush() {
  std::vector<PendingOp> ops;
  ops.swap(t_group);
  ncclResult_t result = t_group_error;
  t_group_error = ncclSuccess;
  if (result != ncclSuccess) return result;  // an op of the group was refused when it was named
  std::vector<bool> sent(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (sent[i]) continue;
    std::vector<wire::NcclOp> group;
    for (size_t j = i; j < ops.size(); ++j) {
      if (!sent[j] && ops[j].comm == ops[i].comm && ops[j].stream == ops[i].stream) {
        group.push_back(ops[j].op);
        sent[j] = true;
      }
    }
    ncclResult_t r = ncclSuccess;
    if (!CaptureGroup(ops[i].comm, ops[i].stream, group, &r)) r = SendGroup(ops[i].comm, ops[i].stream, group);
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

// Checks what libphos.so can check of one op, then queues it in the
// thread's group or sends it as a group of one.
ncclResult_t Enqueue(ncclComm_t comm, cudaStream_t stream, wire::NcclKind kind, const void* send, void* recv,
                     size_t count, ncclDataType_t datatype, ncclRedOp_t redop, int peer) {
  if (comm == nullptr) {
    NoteError("a NULL communicator");
    return ncclInvalidArgument;
  }
  wire::NcclOp o{};
  o.kind = static_cast<uint8_t>(kind);
  o.datatype = static_cast<uint8_t>(datatype);
  o.peer = peer;
  o.send = reinterpret_cast<uint64_t>(send);
  o.recv = reinterpret_cast<uint64_t>(recv);
  o.count = count;
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= ncclNumTypes) o.datatype = 0xff;
  if (wire::NcclReduces(o.kind)) {
    if (static_cast<int>(redop) >= 0 && static_cast<int>(redop) < ncclNumOps) {
      o.redop = static_cast<uint8_t>(redop);
    } else {
      std::lock_guard<std::mutex> lock(g_ops_mu);
      auto it = g_ops.find(static_cast<int>(redop));
      if (it == g_ops.end() || it->second.comm != comm || it->second.datatype != datatype) {
        NoteError("reduction operator " + std::to_string(static_cast<int>(redop)) +
                  " was not made for this communicator and datatype");
        return ncclInvalidArgument;
      }
      o.redop = wire::kNcclPreMulSum;
      o.scalar = static_cast<uint8_t>(it->second.on_device ? wire::NcclScalar::kDevice : wire::NcclScalar::kHost);
      o.scalar_value = it->second.scalar;
    }
  }
  uint64_t send_bytes = 0, recv_bytes = 0;
  if (const char* why = wire::CheckNcclOp(o, comm->nranks, comm->rank, &send_bytes, &recv_bytes); why != nullptr) {
    NoteError(std::string("NCCL ") + wire::NcclKindName(o.kind) + ": " + why);
    return ncclInvalidArgument;
  }
  const uint32_t stream_id = StreamIdOf(stream, DefaultStream::kLegacy);
  if (t_group_depth > 0) {  // sent, or captured, at ncclGroupEnd
    t_group.push_back({comm, stream_id, o});
    return ncclSuccess;
  }
  ncclResult_t captured = ncclSuccess;
  if (CaptureGroup(comm, stream_id, {o}, &captured)) return captured;
  return SendGroup(comm, stream_id, {o});
}

ncclResult_t InitRank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  if (out == nullptr || nranks < 1 || nranks > wire::kMaxNcclRanks || rank < 0 || rank >= nranks) {
    NoteError("ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
    return ncclInvalidArgument;
  }
  wire::NcclInitRequest req{};
  req.comm = g_next_comm.fetch_add(1, std::memory_order_relaxed);
  req.nranks = nranks;
  req.rank = rank;
  std::memcpy(req.unique_id, id.internal, sizeof req.unique_id);
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kNcclCommInitRank, 0, std::as_bytes(std::span(&req, 1)), &r);
  if (w != WireStatus::kSuccess) {
    NoteError(std::string(reinterpret_cast<const char*>(r.data.data()), r.bytes));
    return FromWire(w);
  }
  *out = new ncclComm{req.comm, nranks, rank, CurrentDevice(), id, 0};
  return ncclSuccess;
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT
namespace wire = phos::wire;

PHOS_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;  // the nccl.h libphos.so was built against
  return ncclSuccess;
}

PHOS_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

PHOS_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  static thread_local std::string copy;  // stays valid until this thread's next call
  std::lock_guard<std::mutex> lock(g_last_error_mu);
  copy = g_last_error;
  return copy.c_str();
}

PHOS_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return ncclInvalidArgument;
  // The magic, then 24 random bytes: ranks of one phosd meet by it.
  std::memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  std::memcpy(uniqueId->internal, wire::kNcclIdMagic, sizeof wire::kNcclIdMagic);
  char* random = uniqueId->internal + sizeof wire::kNcclIdMagic;
  if (getrandom(random, 24, 0) != 24) {
    const uint64_t fallback[3] = {static_cast<uint64_t>(getpid()), static_cast<uint64_t>(std::time(nullptr)),
                                  static_cast<uint64_t>(reinterpret_cast<uintptr_t>(uniqueId))};
    std::memcpy(random, fallback, sizeof fallback);
  }
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return InitRank(comm, nranks, commId, rank);
}

// The configuration's hints (CTAs, netName, blocking...) change how NCCL
// schedules, not what it computes; a non-blocking communicator is ready
// when this returns (ncclCommGetAsyncError answers ncclSuccess).
PHOS_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t* config) {
  if (config != nullptr && config->magic != 0xcafebeef) {
    NoteError("ncclCommInitRankConfig: the config was not set from NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  return InitRank(comm, nranks, commId, rank);
}

// Scalable init: every rank passes the same nId unique ids (NCCL spreads
// its bootstrap over them); one of them names the communicator as well as
// all of them do, so phosd's rendezvous takes the first.
PHOS_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                  ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) {
    NoteError("ncclCommInitRankScalable: nId " + std::to_string(nId) + " with " +
              (commIds == nullptr ? "no" : "some") + " unique ids");
    return ncclInvalidArgument;
  }
  if (config != nullptr && config->magic != 0xcafebeef) {
    NoteError("ncclCommInitRankScalable: the config was not set from NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  return InitRank(newcomm, nranks, commIds[0], myrank);
}

PHOS_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (comm == nullptr || ndev < 1) return ncclInvalidArgument;
  if (ndev > 1) {
    SayOnce("phos: ncclCommInitAll over " + std::to_string(ndev) +
            " GPUs: a process under phos uses one GPU (run one process per rank)");
    NoteError("a process under phos uses one GPU");
    return ncclInvalidUsage;
  }
  if (devlist != nullptr && devlist[0] != CurrentDevice()) {
    if (cudaSetDevice(devlist[0]) != cudaSuccess) return ncclUnhandledCudaError;
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  return InitRank(comm, 1, id, 0);
}

// ncclCommSplit, as NCCL defines it, on phos's own calls: every rank's
// (color, key) gathered over the parent (an AllGather on a stream of its
// own), then the ranks of each color form a communicator of their own,
// ranked by key (then by parent rank), from a unique id every member
// derives alike: the parent's, with the split's sequence number and the
// color mixed into bytes phos's ids leave random. A rank with
// NCCL_SPLIT_NOCOLOR takes part and gets NULL.
PHOS_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  if (comm == nullptr || newcomm == nullptr || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) {
    NoteError("ncclCommSplit: a NULL communicator or result, or a negative color");
    return ncclInvalidArgument;
  }
  if (config != nullptr && config->magic != 0xcafebeef) {
    NoteError("ncclCommSplit: the config was not set from NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (t_group_depth > 0) {
    NoteError("ncclCommSplit inside ncclGroupStart/End is not supported by phos");
    return ncclInvalidUsage;
  }
  const int n = comm->nranks;
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(static_cast<size_t>(2 * n));
  void* dev = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaMalloc(&dev, all.size() * sizeof(int32_t)) != cudaSuccess) return ncclUnhandledCudaError;
  ncclResult_t r = ncclSuccess;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMemcpyAsync(static_cast<int32_t*>(dev) + 2 * comm->rank, mine.data(), 2 * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream) != cudaSuccess) {
    r = ncclUnhandledCudaError;
  }
  if (r == ncclSuccess) {
    r = ncclAllGather(static_cast<int32_t*>(dev) + 2 * comm->rank, dev, 2, ncclInt32, comm, stream);
  }
  if (r == ncclSuccess && (cudaMemcpyAsync(all.data(), dev, all.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                           stream) != cudaSuccess ||
                           cudaStreamSynchronize(stream) != cudaSuccess)) {
    r = ncclUnhandledCudaError;
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
  cudaFree(dev);
  if (r != ncclSuccess) return r;
  const uint64_t split = ++comm->splits;
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, parent rank), parent rank)
  for (int q = 0; q < n; ++q) {
    if (all[static_cast<size_t>(2 * q)] == color) members.push_back({{all[static_cast<size_t>(2 * q + 1)], q}, q});
  }
  std::sort(members.begin(), members.end());
  int rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == comm->rank) rank = static_cast<int>(i);
  }
  ncclUniqueId id = comm->unique_id;
  uint64_t mix[2] = {split * 0x9e3779b97f4a7c15ull, static_cast<uint64_t>(color) * 0xc2b2ae3d27d4eb4full + 1};
  for (size_t i = 0; i < sizeof mix; ++i) id.internal[8 + i] ^= reinterpret_cast<const char*>(mix)[i];
  return InitRank(newcomm, static_cast<int>(members.size()), id, rank);
}

// ncclCommShrink: the ranks not in the exclude list (they alone call it,
// with the same list) form a communicator in parent-rank order. Nothing
// needs gathering: each survivor computes its new rank and the unique id
// (the parent's, mixed with the derivation's number and the list) alike.
// NCCL_SHRINK_ABORT (cancel the parent's ongoing operations first) is
// refused: phos cannot cancel them yet; they fail with ncclRemoteError
// once phosd sees the excluded ranks gone.
PHOS_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                        ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (comm == nullptr || newcomm == nullptr || excludeRanksCount < 0 ||
      (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
    NoteError("ncclCommShrink: a NULL communicator, result or exclude list");
    return ncclInvalidArgument;
  }
  if (config != nullptr && config->magic != 0xcafebeef) {
    NoteError("ncclCommShrink: the config was not set from NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT) {
    SayOnce("phos: ncclCommShrink with NCCL_SHRINK_ABORT is not supported yet (phos cannot cancel the parent's "
            "operations)");
    NoteError("ncclCommShrink: only NCCL_SHRINK_DEFAULT is supported by phos");
    return ncclInvalidUsage;
  }
  if (t_group_depth > 0) {
    NoteError("ncclCommShrink inside ncclGroupStart/End is not supported by phos");
    return ncclInvalidUsage;
  }
  std::vector<bool> excluded(static_cast<size_t>(comm->nranks), false);
  uint64_t list_hash = 0x5348524e4bull;  // "SHRNK": apart from every split's color
  for (int i = 0; i < excludeRanksCount; ++i) {
    const int q = excludeRanksList[i];
    if (q < 0 || q >= comm->nranks || excluded[static_cast<size_t>(q)]) {
      NoteError("ncclCommShrink: rank " + std::to_string(q) + " excluded twice or outside the communicator");
      return ncclInvalidArgument;
    }
    excluded[static_cast<size_t>(q)] = true;
  }
  if (excluded[static_cast<size_t>(comm->rank)]) {
    NoteError("ncclCommShrink: called by rank " + std::to_string(comm->rank) + ", which the list excludes");
    return ncclInvalidArgument;
  }
  int rank = 0, size = 0;
  for (int q = 0; q < comm->nranks; ++q) {
    if (excluded[static_cast<size_t>(q)]) {
      list_hash = list_hash * 0x100000001b3ull ^ static_cast<uint64_t>(q + 1);
      continue;
    }
    if (q < comm->rank) ++rank;
    ++size;
  }
  // Its own count: an excluded rank, which does not call it, still agrees
  // with the others on the numbers of later splits.
  const uint64_t seq = ++comm->shrinks;
  ncclUniqueId id = comm->unique_id;
  uint64_t mix[2] = {seq * 0x9e3779b97f4a7c15ull, list_hash * 0xc2b2ae3d27d4eb4full + 0x7f};
  for (size_t i = 0; i < sizeof mix; ++i) id.internal[8 + i] ^= reinterpret_cast<const char*>(mix)[i];
  return InitRank(newcomm, size, id, rank);
}

PHOS_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  return Handle(comm, static_cast<uint32_t>(wire::op::kNcclCommFinalize));
}

PHOS_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // NCCL accepts a NULL communicator here
  ncclResult_t r = Handle(comm, static_cast<uint32_t>(wire::op::kNcclCommDestroy));
  delete comm;
  return r;
}

PHOS_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ncclResult_t r = Handle(comm, static_cast<uint32_t>(wire::op::kNcclCommAbort));
  delete comm;
  return r;
}

PHOS_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) return ncclInvalidArgument;
  return AsyncErrorOf(comm, asyncError);
}

PHOS_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return ncclInvalidArgument;
  return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

PHOS_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

PHOS_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence, ncclComm_t comm) {
  const uint32_t es = wire::NcclTypeBytes(static_cast<uint8_t>(datatype));
  if (op == nullptr || scalar == nullptr || comm == nullptr || es == 0 || static_cast<int>(datatype) < 0) {
    return ncclInvalidArgument;
  }
  PreMulSum p;
  p.datatype = datatype;
  p.comm = comm;
  p.on_device = residence == ncclScalarDevice;
  if (p.on_device) {
    p.scalar = reinterpret_cast<uint64_t>(scalar);
  } else {
    std::memcpy(&p.scalar, scalar, es);  // read now, as NCCL does for a host scalar
  }
  std::lock_guard<std::mutex> lock(g_ops_mu);
  const int id = g_next_op++;
  g_ops[id] = p;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  auto it = g_ops.find(static_cast<int>(op));
  if (it == g_ops.end() || it->second.comm != comm) return ncclInvalidArgument;
  g_ops.erase(it);
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0);
}

PHOS_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root);
}

PHOS_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

PHOS_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kReduce, sendbuff, recvbuff, count, datatype, op, root);
}

PHOS_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0);
}

PHOS_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0);
}

PHOS_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kSend, sendbuff, nullptr, count, datatype, ncclSum, peer);
}

PHOS_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
  return Enqueue(comm, stream, wire::NcclKind::kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer);
}

namespace {

/// One Send or Recv of a collective NCCL builds from point-to-point ops.
struct P2p {
  bool send;
  const void* buf;
  int peer;
};

/// ncclAlltoAll/Gather/Scatter: NCCL defines them as a group of Sends and
/// Recvs; so does libphos.so (phosd runs them as any such group). All or
/// nothing: an op refused leaves none of the others queued.
ncclResult_t SendRecvGroup(ncclComm_t comm, cudaStream_t stream, size_t count, ncclDataType_t datatype,
                           const std::vector<P2p>& ops) {
  if (comm == nullptr) {
    NoteError("a NULL communicator");
    return ncclInvalidArgument;
  }
  const size_t queued = t_group.size();
  ++t_group_depth;
  for (const P2p& op : ops) {
    const ncclResult_t r =
        op.send ? Enqueue(comm, stream, wire::NcclKind::kSend, op.buf, nullptr, count, datatype, ncclSum, op.peer)
                : Enqueue(comm, stream, wire::NcclKind::kRecv, nullptr, const_cast<void*>(op.buf), count, datatype,
                          ncclSum, op.peer);
    if (r != ncclSuccess) {
      t_group.resize(queued);
      --t_group_depth;
      return r;
    }
  }
  return ncclGroupEnd();
}

/// `base` + `index` blocks of `count` elements of `datatype` (NULL stays
/// NULL, for phosd's check to name).
const void* Block(const void* base, int index, size_t count, ncclDataType_t datatype) {
  if (base == nullptr) return nullptr;
  const uint64_t es = wire::NcclTypeBytes(static_cast<uint8_t>(datatype));
  return static_cast<const char*>(base) + static_cast<uint64_t>(index) * count * es;
}

bool ValidType(ncclDataType_t datatype) {
  if (static_cast<int>(datatype) < 0 || wire::NcclTypeBytes(static_cast<uint8_t>(datatype)) == 0) {
    NoteError("datatype " + std::to_string(static_cast<int>(datatype)) + " is not one ncclDataType_t defines");
    return false;
  }
  return true;
}

bool ValidRoot(ncclComm_t comm, int root) {
  if (comm != nullptr && (root < 0 || root >= comm->nranks)) {
    NoteError("root " + std::to_string(root) + " is not a rank of the communicator");
    return false;
  }
  return true;
}

}  // namespace

PHOS_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || !ValidType(datatype)) return ncclInvalidArgument;
  std::vector<P2p> ops;
  for (int r = 0; r < comm->nranks; ++r) {
    ops.push_back({true, Block(sendbuff, r, count, datatype), r});
    ops.push_back({false, Block(recvbuff, r, count, datatype), r});
  }
  return SendRecvGroup(comm, stream, count, datatype, ops);
}

PHOS_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || !ValidType(datatype) || !ValidRoot(comm, root)) return ncclInvalidArgument;
  std::vector<P2p> ops = {{true, sendbuff, root}};
  if (comm->rank == root) {
    for (int r = 0; r < comm->nranks; ++r) ops.push_back({false, Block(recvbuff, r, count, datatype), r});
  }
  return SendRecvGroup(comm, stream, count, datatype, ops);
}

PHOS_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || !ValidType(datatype) || !ValidRoot(comm, root)) return ncclInvalidArgument;
  std::vector<P2p> ops;
  if (comm->rank == root) {
    for (int r = 0; r < comm->nranks; ++r) ops.push_back({true, Block(sendbuff, r, count, datatype), r});
  }
  ops.push_back({false, recvbuff, root});
  return SendRecvGroup(comm, stream, count, datatype, ops);
}

// Buffer and window registration let NCCL take zero-copy and symmetric
// paths; what a collective computes does not depend on them, and phosd
// executes every collective from the buffers the call names. A handle is
// a record of this library's, checked when it is given back (a foreign or
// twice-given handle is refused, as NCCL refuses it).
namespace phos::client {
namespace {
struct NcclRegistration {
  ncclComm_t comm;
  void* buff;
  std::size_t size;
  bool window;
};
std::mutex g_registrations_mu;
std::vector<NcclRegistration*> g_registrations;  // guarded by g_registrations_mu; live handles

ncclResult_t Register(ncclComm_t comm, void* buff, std::size_t size, bool window, void** out, const char* what) {
  if (comm == nullptr || buff == nullptr || size == 0 || out == nullptr) {
    NoteError(std::string(what) + ": a NULL communicator, buffer or handle, or size 0");
    return ncclInvalidArgument;
  }
  auto* r = new NcclRegistration{comm, buff, size, window};
  std::lock_guard<std::mutex> lock(g_registrations_mu);
  g_registrations.push_back(r);
  *out = r;
  return ncclSuccess;
}

ncclResult_t Deregister(ncclComm_t comm, void* handle, bool window, const char* what) {
  std::lock_guard<std::mutex> lock(g_registrations_mu);
  auto it = std::find(g_registrations.begin(), g_registrations.end(), static_cast<NcclRegistration*>(handle));
  if (comm == nullptr || it == g_registrations.end() || (*it)->comm != comm || (*it)->window != window) {
    NoteError(std::string(what) + ": not a handle this communicator registered (or given back already)");
    return ncclInvalidArgument;
  }
  delete *it;
  g_registrations.erase(it);
  return ncclSuccess;
}
}  // namespace
}  // namespace phos::client

PHOS_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return Register(comm, buff, size, false, handle, "ncclCommRegister");
}

PHOS_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return Deregister(comm, handle, false, "ncclCommDeregister");
}

PHOS_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                int winFlags) {
  if (winFlags != NCCL_WIN_DEFAULT && winFlags != NCCL_WIN_COLL_SYMMETRIC) {
    NoteError("ncclCommWindowRegister: unknown window flags " + std::to_string(winFlags));
    return ncclInvalidArgument;
  }
  void* h = nullptr;
  const ncclResult_t r = Register(comm, buff, size, true, &h, "ncclCommWindowRegister");
  if (r == ncclSuccess) *win = static_cast<ncclWindow_t>(h);
  return r;
}

PHOS_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return Deregister(comm, win, true, "ncclCommWindowDeregister");
}

// NCCL's own debug settings (NCCL_DEBUG...) are read again by its next
// call; phos keeps none, so there is nothing to reset.
PHOS_EXPORT void ncclResetDebugInit() {}

PHOS_EXPORT ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

PHOS_EXPORT ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) {
    NoteError("ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--t_group_depth > 0) return ncclSuccess;
  return Flush();
}

// NCCL's profiling names (pnccl*) are the same functions.
#define PHOS_NCCL_ALIAS(name) extern "C" __attribute__((visibility("default"), alias(#name))) decltype(name) p##name;
PHOS_NCCL_ALIAS(ncclGetVersion)
PHOS_NCCL_ALIAS(ncclGetErrorString)
PHOS_NCCL_ALIAS(ncclGetLastError)
PHOS_NCCL_ALIAS(ncclGetUniqueId)
PHOS_NCCL_ALIAS(ncclCommInitRank)
PHOS_NCCL_ALIAS(ncclCommInitRankConfig)
PHOS_NCCL_ALIAS(ncclCommInitAll)
PHOS_NCCL_ALIAS(ncclCommInitRankScalable)
PHOS_NCCL_ALIAS(ncclCommRegister)
PHOS_NCCL_ALIAS(ncclCommDeregister)
PHOS_NCCL_ALIAS(ncclCommWindowRegister)
PHOS_NCCL_ALIAS(ncclCommWindowDeregister)
PHOS_NCCL_ALIAS(ncclResetDebugInit)
PHOS_NCCL_ALIAS(ncclCommFinalize)
PHOS_NCCL_ALIAS(ncclCommSplit)
PHOS_NCCL_ALIAS(ncclCommShrink)
PHOS_NCCL_ALIAS(ncclCommDestroy)
PHOS_NCCL_ALIAS(ncclCommAbort)
PHOS_NCCL_ALIAS(ncclCommGetAsyncError)
PHOS_NCCL_ALIAS(ncclCommCount)
PHOS_NCCL_ALIAS(ncclCommCuDevice)
PHOS_NCCL_ALIAS(ncclCommUserRank)
PHOS_NCCL_ALIAS(ncclMemAlloc)
PHOS_NCCL_ALIAS(ncclMemFree)
PHOS_NCCL_ALIAS(ncclRedOpCreatePreMulSum)
PHOS_NCCL_ALIAS(ncclRedOpDestroy)
PHOS_NCCL_ALIAS(ncclAllReduce)
PHOS_NCCL_ALIAS(ncclBroadcast)
PHOS_NCCL_ALIAS(ncclBcast)
PHOS_NCCL_ALIAS(ncclReduce)
PHOS_NCCL_ALIAS(ncclAllGather)
PHOS_NCCL_ALIAS(ncclReduceScatter)
PHOS_NCCL_ALIAS(ncclSend)
PHOS_NCCL_ALIAS(ncclRecv)
PHOS_NCCL_ALIAS(ncclGroupStart)
PHOS_NCCL_ALIAS(ncclGroupEnd)
PHOS_NCCL_ALIAS(ncclAlltoAll)
PHOS_NCCL_ALIAS(ncclGather)
PHOS_NCCL_ALIAS(ncclScatter)
