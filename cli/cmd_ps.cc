// phos ps: the sessions (app processes) phosd serves.
#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"

namespace phos::cli {
namespace {

std::string StateName(v1::SessionState state) {
  switch (state) {
    case v1::SESSION_RUNNING: return "running";
    case v1::SESSION_CHECKPOINTING: return "checkpointing";
    case v1::SESSION_RESTORING: return "restoring";
    case v1::SESSION_MIGRATING: return "migrating";
    case v1::SESSION_PARKED: return "parked";
    case v1::SESSION_EXITED: return "exited";
    default: return "unknown";
  }
}

// Calls by access-set kind (docs/protocols.md "Access sets (implemented)"): exact / speculated / unvalidatable.
// The home GPU, then the others the process uses: "0", "0+1".
std::string Gpus(const v1::SessionInfo& si) {
  std::string gpus = std::to_string(si.device());
  for (int d : si.other_devices()) gpus += "+" + std::to_string(d);
  return gpus;
}

std::string AccessCounts(const v1::SessionInfo& si) {
  return std::to_string(si.calls_exact()) + "/" + std::to_string(si.calls_speculated()) + "/" +
         std::to_string(si.calls_unvalidatable());
}

// The C/R engine's history of the session: checkpoints / restores /
// fallbacks (mis-speculations handled: CoW retaken stop-the-world, recopy
// buffers re-dirtied, concurrent restores rolled back). `--json` has every
// counter by name.
std::string CrCounts(const v1::SessionInfo& si) {
  auto get = [&si](const char* name) -> uint64_t {
    auto it = si.counters().find(name);
    return it == si.counters().end() ? 0 : it->second;
  };
  const uint64_t fallbacks =
      get("cow_fallbacks") + get("recopy_misses") + get("restore_rollbacks");
  return std::to_string(get("checkpoints")) + "/" + std::to_string(get("restores")) + "/" + std::to_string(fallbacks);
}

// Under the table: the kernels whose launches a checkpoint cannot
// validate, and why (a few per process; --json has up to 64).
void PrintUnvalidatable(const std::vector<const v1::SessionInfo*>& sessions) {
  constexpr int kShown = 5;
  bool header = false;
  for (const v1::SessionInfo* si : sessions) {
    const int n = si->unvalidatable_kernels_size();
    if (n == 0) continue;
    if (!header) {
      std::cout << "\nUnvalidatable kernels (a checkpoint cannot check their writes; --unvalidated=trust|stop "
                   "decides what it does with them):\n";
      header = true;
    }
    for (int k = 0; k < std::min(n, kShown); ++k) {
      const v1::UnvalidatableKernel& uk = si->unvalidatable_kernels(k);
      std::cout << "  pid " << si->pid() << "  " << uk.kernel() << ": " << uk.reason() << "\n";
    }
    const uint64_t more = static_cast<uint64_t>(std::max(0, n - kShown)) + si->unvalidatable_kernels_not_listed();
    if (more > 0) std::cout << "  pid " << si->pid() << "  ... and " << more << " more (--json lists the first 64)\n";
  }
}

int RunPs(const GlobalOptions& global, int pid, bool json) {
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  v1::ListSessionsRequest req;
  req.set_pid(pid);
  v1::ListSessionsReply reply;
  grpc::Status rpc = stub->ListSessions(&ctx, req, &reply);
  if (!rpc.ok()) {
    std::cerr << "phos: " << DescribeRpcError("ListSessions", rpc) << "\n";
    return 1;
  }
  if (json) {
    PrintJson(reply);
    return 0;
  }
  // The ranks of one NCCL job together, in rank order; other sessions after.
  std::vector<const v1::SessionInfo*> sessions;
  for (const v1::SessionInfo& si : reply.sessions()) sessions.push_back(&si);
  std::stable_sort(sessions.begin(), sessions.end(), [](const v1::SessionInfo* a, const v1::SessionInfo* b) {
    if (a->job().empty() != b->job().empty()) return !a->job().empty();
    return std::make_pair(a->job(), a->job_rank()) < std::make_pair(b->job(), b->job_rank());
  });
  std::vector<std::vector<std::string>> rows;
  for (const v1::SessionInfo* p : sessions) {
    const v1::SessionInfo& si = *p;
    const std::string job = si.job().empty() ? "-"
                                             : si.job() + " " + std::to_string(si.job_rank()) + "/" +
                                                   std::to_string(si.job_size());
    rows.push_back({std::to_string(si.pid()), si.launcher_pid() > 0 ? std::to_string(si.launcher_pid()) : "-",
                    si.name().empty() ? "-" : si.name(), std::to_string(si.session_id()), job,
                    Gpus(si), HumanBytes(si.device_memory_bytes()),
                    std::to_string(si.buffer_count()), AccessCounts(si), CrCounts(si), StateName(si.state()),
                    si.command()});
  }
  std::cout << FormatTable(
      {"PID", "LAUNCHER", "NAME", "SESSION", "JOB (RANK/SIZE)", "GPU", "GPU-MEM", "BUFFERS", "CALLS(EX/SPEC/UNVAL)", "C/R(CKPT/RST/FALLBACK)", "STATE",
       "COMMAND"}, rows);
  PrintUnvalidatable(sessions);
  return 0;
}

}  // namespace

void AddPsCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto pid = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app->add_subcommand(
      "ps", "List the processes running under phos: pid (LAUNCHER: the `phos run` that started it; NAME: its "
            "--name), the NCCL job it is a rank of (its ranks listed together), the GPU it runs on (phosd's "
            "ordinal), GPU memory, buffers, state.");
  cmd->add_option("--pid", *pid, "Only this process (its pid or its `phos run`'s)");
  cmd->add_flag("--json", *json, "Print as JSON (for tools)");
  cmd->callback([global, pid, json, exit_code] { *exit_code = RunPs(*global, *pid, *json); });
}

}  // namespace phos::cli
