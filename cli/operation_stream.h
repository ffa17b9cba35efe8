// Showing a long operation's OperationEvent stream (checkpoint, restore):
// a redrawn progress bar on a terminal, plain progress lines otherwise (one
// per phase change and at most one a second), the final result, or the
// error. With --json every event is printed as one JSON object per line.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "phos.grpc.pb.h"

namespace phos::cli {

/// Reads `reader` to the end. Returns the exit code: 0 done, 1 failed,
/// 2 the daemon does not implement what was asked (UNIMPLEMENTED).
/// `what` names the operation in messages ("checkpoint", "restore").
/// `result` (optional) receives the final OperationResult on success.
/// `stop_at_running` (optional, not with json): the call's context; at the
/// "running" event (the operation's process runs) its message is printed,
/// the call is cancelled (the daemon finishes the operation regardless) and
/// 0 returned without a result — `phos template start --detach` prints the
/// pid the moment the instance runs, not once every buffer has loaded.
int ShowOperation(grpc::ClientReaderInterface<v1::OperationEvent>* reader, const std::string& rpc,
                  const std::string& what, bool json, v1::OperationResult* result = nullptr,
                  grpc::ClientContext* stop_at_running = nullptr);

}  // namespace phos::cli
