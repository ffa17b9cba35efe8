// Streaming a long operation's OperationEvents from a gRPC handler: the
// progress events while a task runs, the terminal `failed` event, and the
// phos::Status -> gRPC code mapping. Used by every long-operation RPC
// (checkpoint_rpcs.cc, migrate_rpcs.cc, template_rpcs.cc).
//
// Stateless functions; a ServerWriter is written from the handler's thread
// only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <future>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "engine/progress.h"
#include "phos.grpc.pb.h"
#include "common/grpc_status.h"
#include "process/process_image.h"

namespace phos::server {

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

/// The `running` progress event ("<prefix> N") of a whole-process restore
/// or template start, sent the moment the process runs rather than when its
/// buffers have loaded: the restoring thread calls Ran(pid) (from
/// ProcessRestoreOptions::on_running), which only flags it and wakes the
/// stream; the handler thread writes it from StreamUntilDone's on_wake
/// (WriteIfRan), since a ServerWriter is not thread-safe.
class RunningAnnouncer {
 public:
  RunningAnnouncer(grpc::ServerWriter<v1::OperationEvent>* writer, engine::Progress& progress,
                   std::string prefix)
      : writer_(writer), progress_(progress), prefix_(std::move(prefix)) {}
  void Ran(pid_t pid) {  // any thread
    pid_.store(pid);
    progress_.Notify();
  }
  void WriteIfRan() {  // the handler thread
    const pid_t pid = pid_.load();
    if (pid == 0 || sent_) return;
    sent_ = true;
    v1::OperationEvent ev;
    ev.mutable_progress()->set_phase("running");
    ev.mutable_progress()->set_message(prefix_ + " " + std::to_string(pid));
    writer_->Write(ev);
  }

 private:
  grpc::ServerWriter<v1::OperationEvent>* const writer_;
  engine::Progress& progress_;
  const std::string prefix_;
  std::atomic<pid_t> pid_{0};
  bool sent_ = false;  // handler thread only
};

/// A request's CriuOptions as the process code takes them.
inline process::CriuUserOptions FromProto(const v1::CriuOptions& c) {
  return process::CriuUserOptions{c.shell_job(), c.tcp_established(), c.file_locks()};
}

}  // namespace phos::server
