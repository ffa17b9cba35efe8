// The table of forwarded calls as data: one CallRow per row of calls.def
// (the only list of ops; docs/interposer.md "Adding a call"). Both sides may
// read it: phosd dispatches by it (daemon/session/call_handlers.cc), tests
// check it. It names no daemon code; phosd maps each row's handler token to
// a function itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "protocol/wire.h"

namespace phos::wire {

/// calls.def's Shape column.
enum class PayloadShape : uint8_t {
  kExact = 0,  // exactly the request struct
  kTail = 1,   // the request struct, then trailing bytes it names
};
/// calls.def's Staging column.
enum class StagingRule : uint8_t {
  kUnstaged = 0,  // a staged record is refused (kNotSupported)
  kStaged = 1,    // staging pieces are accepted
};
/// calls.def's Sync column.
enum class SyncRule : uint8_t {
  kAsync = 0,  // stream-ordered; usually posted
  kSync = 1,   // finishes its work before it answers
};
/// calls.def's Access column: how phosd derives a call's access set
/// (daemon/session/access_spec.h gives each rule its operand roles).
enum class AccessRule : uint8_t {
  kNoDeviceMemory = 0,  // an empty exact set
  kCopy = 1,            // dst written, src read
  kFill = 2,            // dst written
  kRelease = 3,         // ptr written (the buffer is freed)
  kKernel = 4,          // the kernel's access plan
  kWhole = 5,           // any buffer of the session (kUnknown)
  kBlas = 6,            // a cuBLAS routine's operands (protocol/blas_spec.h)
  kCollective = 7,      // NCCL ops: send buffers read, receive buffers written (protocol/nccl_wire.h)
};

/// Bytes of a request or reply struct in the payload (0 for the markers).
template <typename T>
inline constexpr uint32_t kWireBytes = std::is_empty_v<T> ? 0u : static_cast<uint32_t>(sizeof(T));

/// One row of calls.def.
struct CallRow {
  ApiId id{};
  const char* op = nullptr;       // "MemcpyAsync" (wire::op::kMemcpyAsync)
  const char* api = nullptr;      // "cudaMemcpyAsync" (the canonical id's name)
  uint32_t request_bytes = 0;     // sizeof the request struct (0: no payload)
  PayloadShape shape = PayloadShape::kExact;
  uint32_t reply_bytes = 0;       // sizeof the reply struct (0: none or variable)
  bool reply_variable = false;    // ReplyBytes: inline data or a ChunkReply
  StagingRule staging = StagingRule::kUnstaged;
  SyncRule sync = SyncRule::kSync;
  AccessRule access = AccessRule::kNoDeviceMemory;

  bool staged() const { return staging == StagingRule::kStaged; }
  bool synchronous() const { return sync == SyncRule::kSync; }
};

// Every request and reply must fit the places they travel in.
#define PHOS_CALL(Op, Api, Request, Shape, Reply, Handler, Staging, Sync, Access)                 \
  static_assert(std::is_empty_v<Request> || kIsWireStruct<Request>, #Op ": request is not a wire struct"); \
  static_assert(kWireBytes<Reply> <= ring::kSlotResultBytes, #Op ": reply larger than a completion slot");
#include "protocol/calls.def"
#undef PHOS_CALL

/// Every row, in calls.def's order.
inline constexpr CallRow kCalls[] = {
#define PHOS_CALL(Op, Api, Request, Shape, Reply, Handler, Staging, Sync, Access)                           \
  CallRow{op::k##Op,          #Op,                                                                       \
          #Api,               kWireBytes<Request>,                                                       \
          PayloadShape::k##Shape, kWireBytes<Reply>,                                                     \
          std::is_same_v<Reply, ReplyBytes>, StagingRule::k##Staging,                                    \
          SyncRule::k##Sync,  AccessRule::k##Access},
#include "protocol/calls.def"
#undef PHOS_CALL
};
inline constexpr size_t kCallCount = std::size(kCalls);

/// The row of `id`; nullptr when no row has it.
constexpr const CallRow* FindCallRow(ApiId id) {
  for (const CallRow& r : kCalls)
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace phos::wire
