// The NCCL op the backend tests build most (sim unit tests, the conformance
// suite, tests/gpu): float32, ncclSum unless told, as phosd decodes it.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/collective.h"

namespace phos::backend::testing {

inline CollectiveOp FloatOp(CollectiveOp::Kind kind, DevicePtr send, DevicePtr recv, std::uint64_t count,
                            int peer = 0, std::uint8_t redop = 0) {
  CollectiveOp op;
  op.kind = kind;
  op.datatype = 7;  // ncclFloat32
  op.redop = redop;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.peer = peer;
  return op;
}

}  // namespace phos::backend::testing
