// phos status: what the daemon runs on.
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"

namespace phos::cli {
namespace {

int RunStatus(const GlobalOptions& global, bool json) {
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  v1::StatusReply reply;
  grpc::Status rpc = stub->Status(&ctx, v1::StatusRequest(), &reply);
  if (!rpc.ok()) {
    std::cerr << "phos: " << DescribeRpcError("Status", rpc) << "\n";
    return 1;
  }
  if (json) {
    PrintJson(reply);
    return 0;
  }
  std::cout << "phosd     " << reply.version() << " (pid " << reply.daemon_pid() << ", up "
            << HumanDuration(reply.uptime_ms()) << ")\n"
            << "socket    " << reply.socket_path() << "\n"
            << "backend   " << reply.backend() << " — " << reply.backend_detail() << "\n"
            << "sessions  " << reply.session_count() << "\n";
  std::vector<std::vector<std::string>> rows;
  for (const v1::GpuInfo& g : reply.gpus()) {
    rows.push_back({std::to_string(g.ordinal()), g.name(),
                    std::to_string(g.compute_capability_major()) + "." +
                        std::to_string(g.compute_capability_minor()),
                    std::to_string(g.multiprocessor_count()), HumanBytes(g.total_memory_bytes()),
                    HumanBytes(g.free_memory_bytes())});
  }
  std::cout << "\n" << FormatTable({"GPU", "NAME", "CC", "SMS", "MEMORY", "FREE"}, rows);
  if (!reply.counters().empty()) {
    // Counters (context pool, fallbacks, ...) sorted by name: the proto map
    // has no order.
    std::map<std::string, uint64_t> sorted(reply.counters().begin(), reply.counters().end());
    std::vector<std::vector<std::string>> counter_rows;
    for (const auto& [name, value] : sorted) counter_rows.push_back({name, std::to_string(value)});
    std::cout << "\n" << FormatTable({"COUNTER", "VALUE"}, counter_rows);
  }
  return 0;
}

}  // namespace

void AddStatusCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app->add_subcommand(
      "status", "Show the daemon's backend, GPUs and their memory, version and uptime.");
  cmd->add_flag("--json", *json, "Print the raw status as JSON (for tools)");
  cmd->callback([global, json, exit_code] { *exit_code = RunStatus(*global, *json); });
}

}  // namespace phos::cli
