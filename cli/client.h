// Connecting the CLI to phosd over its unix socket.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "phos.grpc.pb.h"

namespace phos::cli {

/// Connects to the daemon at `socket_path`. Unavailable, with one line that
/// says where it looked and how to start a daemon, when none answers within
/// `timeout_ms`.
Status ConnectToDaemon(const std::string& socket_path, int timeout_ms,
                       std::unique_ptr<v1::Phos::Stub>* out);

/// One line for a failed RPC: "<rpc>: <grpc message>".
std::string DescribeRpcError(const std::string& rpc, const grpc::Status& status);

/// ConnectToDaemon, printing "phos: <why>" to stderr on failure.
bool ConnectOrExplain(const std::string& socket_path, int timeout_ms,
                      std::unique_ptr<v1::Phos::Stub>* out);

/// Prints a message as indented JSON with the proto field names (for
/// `--json`); every field is printed, defaults included.
void PrintJson(const google::protobuf::Message& message);

/// Waits until `pid` exits, for a restored process (restore, template
/// start) whose exit status phosd could not report (it could not reap it).
/// Not our child, so no waitpid(): a pidfd becomes readable when the
/// process exits (fallback: poll /proc/PID every 100 ms).
void WaitForExit(int pid);

}  // namespace phos::cli
