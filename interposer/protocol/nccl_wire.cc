#include "protocol/nccl_wire.h"

#include <iterator>
#include <limits>

namespace phos::wire {

uint32_t NcclTypeBytes(uint8_t t) {
  switch (t) {
    case 0: case 1: case 10: case 11: return 1;  // int8, uint8, fp8 e4m3, fp8 e5m2
    case 6: case 9: return 2;                    // half, bfloat16
    case 2: case 3: case 7: return 4;            // int32, uint32, float
    case 4: case 5: case 8: return 8;            // int64, uint64, double
    default: return 0;
  }
}

const char* NcclTypeName(uint8_t t) {
  static const char* const kNames[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",
                                       "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
                                       "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return t < std::size(kNames) ? kNames[t] : "?";
}

const char* NcclKindName(uint8_t kind) {
  static const char* const kNames[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "Send", "Recv"};
  return kind < std::size(kNames) ? kNames[kind] : "?";
}

bool NcclReduces(uint8_t kind) {
  const auto k = static_cast<NcclKind>(kind);
  return k == NcclKind::kAllReduce || k == NcclKind::kReduce || k == NcclKind::kReduceScatter;
}

bool NcclIsCollective(uint8_t kind) {
  return kind < static_cast<uint8_t>(NcclKind::kCount) && kind != static_cast<uint8_t>(NcclKind::kSend) &&
         kind != static_cast<uint8_t>(NcclKind::kRecv);
}

bool NcclDeviceScalar(const NcclOp& op) {
  return NcclReduces(op.kind) && op.redop == kNcclPreMulSum && op.scalar == static_cast<uint8_t>(NcclScalar::kDevice);
}

const char* CheckNcclOp(const NcclOp& op, int nranks, int rank, uint64_t* send_bytes, uint64_t* recv_bytes) {
  *send_bytes = 0;
  *recv_bytes = 0;
  if (op.kind >= static_cast<uint8_t>(NcclKind::kCount)) return "unknown op kind";
  const auto kind = static_cast<NcclKind>(op.kind);
  const uint32_t es = NcclTypeBytes(op.datatype);
  if (es == 0) return "datatype is not one ncclDataType_t defines";
  if (nranks < 1 || rank < 0 || rank >= nranks) return "bad rank";
  if (NcclReduces(op.kind)) {
    if (op.redop > 4 && op.redop != kNcclPreMulSum) return "reduction operator is not one NCCL defines";
    if (op.redop == kNcclPreMulSum && op.scalar != static_cast<uint8_t>(NcclScalar::kHost) &&
        op.scalar != static_cast<uint8_t>(NcclScalar::kDevice)) {
      return "PreMulSum operator without its scalar";
    }
    if (NcclDeviceScalar(op) && op.scalar_value == 0) return "a NULL PreMulSum scalar";
  }
  const bool rooted = kind == NcclKind::kBroadcast || kind == NcclKind::kReduce || kind == NcclKind::kSend ||
                      kind == NcclKind::kRecv;
  if (rooted && (op.peer < 0 || op.peer >= nranks)) return "root or peer is not a rank of the communicator";
  // count * es (* nranks) must not overflow.
  const uint64_t max = std::numeric_limits<uint64_t>::max() / es / static_cast<uint64_t>(nranks);
  if (op.count > max) return "count too large";
  const uint64_t bytes = op.count * es;
  const uint64_t all = bytes * static_cast<uint64_t>(nranks);
  switch (kind) {
    case NcclKind::kAllReduce: *send_bytes = bytes; *recv_bytes = bytes; break;
    case NcclKind::kBroadcast:
      *send_bytes = op.peer == rank ? bytes : 0;
      *recv_bytes = bytes;
      break;
    case NcclKind::kReduce:
      *send_bytes = bytes;
      *recv_bytes = op.peer == rank ? bytes : 0;
      break;
    case NcclKind::kAllGather: *send_bytes = bytes; *recv_bytes = all; break;
    case NcclKind::kReduceScatter: *send_bytes = all; *recv_bytes = bytes; break;
    case NcclKind::kSend: *send_bytes = bytes; break;
    case NcclKind::kRecv: *recv_bytes = bytes; break;
    case NcclKind::kCount: break;
  }
  if (bytes != 0 && ((*send_bytes != 0 && op.send == 0) || (*recv_bytes != 0 && op.recv == 0))) {
    return "a NULL buffer";
  }
  return nullptr;
}

}  // namespace phos::wire
