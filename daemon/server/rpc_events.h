// Streaming a long operation's OperationEvents from a gRPC handler: the
// progress events while a task runs, the terminal `failed` event, and the
// phos::Status -> gRPC code mapping. Used by every long-operation RPC
// (checkpoint_rpcs.cc, migrate_rpcs.cc, template_rpcs.cc).
//
// Stateless functions; a ServerWriter is written from the handler's thread
// only.
#pragma once

#include <functional>
#include <future>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "engine/progress.h"
#include "phos.grpc.pb.h"
#include "server/process_image.h"

namespace phos::server {

grpc::StatusCode ToGrpcCode(const phos::Status& s);

/// One progress event (a client that went away is ignored: the operation
/// still completes).
void WriteProgress(grpc::ServerWriter<v1::OperationEvent>* writer, const engine::ProgressSnapshot& p);

/// Streams progress until `done` is ready and returns its status. Never
/// returns early: the task may reference the caller's locals. `on_wake`
/// (optional) runs on this thread at every wake, before the progress is
/// written: the place to write an event the task only flags (the writer is
/// not thread-safe).
phos::Status StreamUntilDone(std::future<phos::Status>& done, const engine::Progress& progress,
                             grpc::ServerWriter<v1::OperationEvent>* writer,
                             const std::function<void()>& on_wake = {});

/// Logs, writes the terminal `failed` event and returns the matching status.
grpc::Status FailOperation(grpc::ServerWriter<v1::OperationEvent>* writer, const std::string& rpc,
                           const phos::Status& s);

/// A request's CriuOptions as the process code takes them.
inline CriuUserOptions FromProto(const v1::CriuOptions& c) {
  return CriuUserOptions{c.shell_job(), c.tcp_established(), c.file_locks()};
}

}  // namespace phos::server
