#include "cli/target.h"

#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/client.h"

namespace phos::cli {

void AddTargetOptions(CLI::App* cmd, TargetArgs* args, bool positional) {
  const char* help =
      "The process: its pid (as `phos ps` shows it, or the pid of the `phos run` that started it) or the name "
      "given to `phos run --name`";
  if (positional) cmd->add_option("target", args->target, help);
  cmd->add_option("--pid", args->pid, positional ? "The same as TARGET" : help);
}

int ResolveTarget(const GlobalOptions& global, const TargetArgs& args, const std::string& command) {
  if (!args.pid.empty() && !args.target.empty()) {
    std::cerr << "phos " << command << ": give the process once: a TARGET or --pid, not both\n";
    return 0;
  }
  if (args.pid.empty() && args.target.empty()) {
    std::cerr << "phos " << command << ": which process? give its pid or name (--pid PID|NAME; `phos ps` "
              << "lists them)\n";
    return 0;
  }
  const std::string& t = args.pid.empty() ? args.target : args.pid;
  if (std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    try {
      const long v = std::stol(t);
      if (v > 0 && v <= 0x7fffffff) return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    std::cerr << "phos " << command << ": '" << t << "' is not a pid\n";
    return 0;
  }
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 0;
  grpc::ClientContext ctx;
  v1::ListSessionsReply reply;
  grpc::Status rpc = stub->ListSessions(&ctx, v1::ListSessionsRequest(), &reply);
  if (!rpc.ok()) {
    std::cerr << "phos: " << DescribeRpcError("ListSessions", rpc) << "\n";
    return 0;
  }
  int pid = 0;
  for (const v1::SessionInfo& s : reply.sessions()) {
    if (s.name() == t) pid = s.pid();  // names are unique per phosd; ids grow: the newest wins
  }
  // Else a job's name (`phos run --job`, or the one `phos ps` shows): its
  // lowest rank stands for it (`phos checkpoint JOB --job`).
  if (pid == 0) {
    int best_rank = -1;
    for (const v1::SessionInfo& s : reply.sessions()) {
      if (s.job() == t && (best_rank < 0 || s.job_rank() < best_rank)) {
        best_rank = s.job_rank();
        pid = s.pid();
      }
    }
  }
  if (pid == 0) {
    std::cerr << "phos " << command << ": no process or job named '" << t
              << "' on this phosd (names come from `phos run --name` and `--job`; `phos ps` lists them)\n";
  }
  return pid;
}

}  // namespace phos::cli
