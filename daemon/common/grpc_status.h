// phos::Status -> gRPC status, one mapping for every service phosd serves
// (PhosService's RPCs, the peer plane's PhosPeer). The peer's client side
// maps back with PeerStatus (peer_client.h).
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace phos {

grpc::StatusCode ToGrpcCode(const phos::Status& s);

/// The code above with the status's message.
inline grpc::Status ToGrpcStatus(const phos::Status& s) {
  return s.ok() ? grpc::Status::OK : grpc::Status(ToGrpcCode(s), s.message());
}

}  // namespace phos
