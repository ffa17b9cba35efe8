#include "common/grpc_status.h"

namespace phos {

grpc::StatusCode ToGrpcCode(const phos::Status& s) {
  using C = phos::Status::Code;
  switch (s.code()) {
    case C::kOk: return grpc::StatusCode::OK;
    case C::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case C::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case C::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case C::kOutOfMemory: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case C::kNotSupported: return grpc::StatusCode::UNIMPLEMENTED;
    case C::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case C::kCorruption: return grpc::StatusCode::DATA_LOSS;
    case C::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    default: return grpc::StatusCode::INTERNAL;
  }
}

}  // namespace phos
