// NCCL on the wire (docs/interposer.md "NCCL"): the requests libphos.so
// sends for communicators and groups of collectives, and the one check both
// sides run on an op — NCCL answers a bad argument at once, so must
// libphos.so; phosd checks again (the request is untrusted) and takes the
// op's device ranges from the same extents for its access set.
// Pure functions of their arguments: any thread.
#pragma once

#include <cstdint>

namespace phos::wire {

inline constexpr uint32_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
/// The first bytes of a unique id libphos.so made (ncclGetUniqueId).
inline constexpr char kNcclIdMagic[8] = {'p', 'h', 'o', 's', 'n', 'c', 'c', 'l'};

/// The largest communicator phos forms (NCCL sets none; this bounds what
/// one app can make phosd allocate per communicator).
inline constexpr int32_t kMaxNcclRanks = 16384;

/// kNcclCommInitRank: the app's id for its communicator (nonzero, minted
/// by libphos.so) and what ncclCommInitRank was given. Blocks until every
/// rank joined.
struct NcclInitRequest {
  uint32_t comm;
  int32_t nranks;
  int32_t rank;
  uint32_t pad;
  uint8_t unique_id[kNcclUniqueIdBytes];
};
static_assert(sizeof(NcclInitRequest) == 144);

/// What an op of a group does (backend::CollectiveOp::Kind, same order).
enum class NcclKind : uint8_t { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSend, kRecv, kCount };
inline constexpr uint8_t kNcclPreMulSum = 0xff;  // NcclOp::redop of a ncclRedOpCreatePreMulSum operator
enum class NcclScalar : uint8_t { kNone, kHost, kDevice };

/// One op of a group.
struct NcclOp {
  uint8_t kind;      // NcclKind
  uint8_t datatype;  // ncclDataType_t
  uint8_t redop;     // ncclSum .. ncclAvg, or kNcclPreMulSum
  uint8_t scalar;    // NcclScalar (PreMulSum only)
  int32_t peer;      // root (Broadcast, Reduce) or peer (Send, Recv); else 0
  uint64_t send;     // device addresses (0 where the op has none)
  uint64_t recv;
  uint64_t count;    // elements, as the NCCL call names them
  uint64_t scalar_value;  // kHost: the scalar's bytes (low bytes); kDevice: its address
};
static_assert(sizeof(NcclOp) == 40);

/// kNcclGroup: `op_count` NcclOps of one communicator follow, run as one
/// group on the frame's stream.
struct NcclGroupRequest {
  uint32_t comm;
  uint32_t op_count;
};
static_assert(sizeof(NcclGroupRequest) == 8);
inline constexpr uint32_t kMaxNcclGroupOps = 1024;

/// ncclResult_t values phosd answers (kNcclCommGetAsyncError).
inline constexpr int64_t kNcclSuccess = 0, kNcclInternalError = 3, kNcclInvalidUsage = 5, kNcclRemoteError = 6;

/// Bytes of one element of ncclDataType_t `t` (0: not a type NCCL defines).
uint32_t NcclTypeBytes(uint8_t t);
/// ncclDataType_t's name ("ncclFloat32"), "?" for others.
const char* NcclTypeName(uint8_t t);
const char* NcclKindName(uint8_t kind);

/// Whether ops of kind `kind` (NcclKind) reduce (take an operator), and
/// whether they are collectives (not Send/Recv).
bool NcclReduces(uint8_t kind);
bool NcclIsCollective(uint8_t kind);

/// Whether `op` reads a PreMulSum scalar from device memory (at
/// op.scalar_value; a reduction only).
bool NcclDeviceScalar(const NcclOp& op);

/// Checks `op` of rank `rank` of an `nranks`-rank communicator and sets the
/// bytes it reads at `send` and writes at `recv` (0 where it touches none:
/// a Broadcast's send on a non-root, a Reduce's recv on one). nullptr if it
/// is well formed, else why not (a message naming the field).
const char* CheckNcclOp(const NcclOp& op, int nranks, int rank, uint64_t* send_bytes, uint64_t* recv_bytes);

}  // namespace phos::wire
