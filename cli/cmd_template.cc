// phos template save NAME --pid PID|NAME [--mode stop|cow|recopy] [--kill|--leave-running] [--json]
// phos template start NAME [--detach] [--json]
// phos template list [--json]
// phos template rm NAME
// Serverless templates (docs/templates.md): a whole-process image phosd
// keeps under a name, with an in-memory copy, to start new instances from.
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <iostream>
#include <memory>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/checkpoint_options.h"
#include "cli/operation_stream.h"
#include "cli/target.h"

namespace phos::cli {
namespace {

struct TemplateArgs {
  std::string name;
  TargetArgs target;
  std::string mode = "stop";
  bool leave_running = false;
  bool kill = true;
  bool detach = false;
  bool json = false;
};

int RunSave(const GlobalOptions& global, const TemplateArgs& a) {
  const int pid = ResolveTarget(global, a.target, "template save");
  if (pid == 0) return 2;
  v1::TemplateSaveRequest req;
  req.set_name(a.name);
  req.set_pid(pid);
  req.set_mode(ModeFromName(a.mode));
  req.set_leave_running(!a.kill);
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  auto reader = stub->TemplateSave(&ctx, req);
  v1::OperationResult result;
  const int rc = ShowOperation(reader.get(), "TemplateSave", "template save", a.json, &result);
  if (rc != 0 || a.json) return rc;
  std::cout << "saved template " << a.name << " from pid " << result.pid() << "; pid " << result.pid()
            << (!a.kill ? " keeps running (no instance can start on this phosd until it ends)"
                                : " was ended")
            << "\n";
  return 0;
}

int RunStart(const GlobalOptions& global, const TemplateArgs& a) {
  v1::TemplateStartRequest req;
  req.set_name(a.name);
  req.set_detach(a.detach);
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  auto reader = stub->TemplateStart(&ctx, req);
  v1::OperationResult result;
  // The "running" event prints "started pid N" as soon as the instance
  // runs. --detach returns right then (its buffers may still be loading;
  // --json waits for the result and its counters); without it the stream
  // stays open until the instance exits.
  const int rc = ShowOperation(reader.get(), "TemplateStart", "template start", a.json, &result,
                               a.detach && !a.json ? &ctx : nullptr);
  if (rc != 0) return rc;
  if (a.detach) return 0;
  if (result.has_exit_status()) {
    if (!a.json) std::cout << "pid " << result.pid() << " exited with status " << result.exit_status() << "\n";
    return result.exit_status();
  }
  // phosd could not reap it: wait here; the exit status is unknown.
  if (!a.json) std::cout << "started pid " << result.pid() << "\n" << std::flush;
  WaitForExit(result.pid());
  if (!a.json) std::cout << "pid " << result.pid() << " exited (its exit status is unknown: phosd is not its parent)\n";
  return 0;
}

std::string LocalTime(std::uint64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int RunList(const GlobalOptions& global, bool json) {
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  v1::TemplateListReply reply;
  grpc::Status rpc = stub->TemplateList(&ctx, v1::TemplateListRequest(), &reply);
  if (!rpc.ok()) {
    std::cerr << "phos: " << DescribeRpcError("TemplateList", rpc) << "\n";
    return 1;
  }
  if (json) {
    PrintJson(reply);
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const v1::TemplateInfo& t : reply.templates()) {
    std::string running;
    for (int pid : t.running_pids()) running += (running.empty() ? "" : ",") + std::to_string(pid);
    rows.push_back({t.name(), HumanBytes(t.bytes()), LocalTime(t.saved_unix_ms()), std::to_string(t.source_pid()),
                    t.mode(), t.cache_dir().empty() ? "no" : "yes", running.empty() ? "-" : running,
                    t.source_command()});
  }
  std::cout << FormatTable({"NAME", "SIZE", "SAVED", "SOURCE-PID", "MODE", "IN-MEMORY", "RUNNING", "COMMAND"}, rows);
  std::cout << "templates in " << reply.root() << "; "
            << (reply.cache_root().empty() ? reply.cache_note() : "in-memory copies in " + reply.cache_root())
            << "\n";
  return 0;
}

int RunRemove(const GlobalOptions& global, const std::string& name) {
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  v1::TemplateRemoveRequest req;
  req.set_name(name);
  v1::TemplateRemoveReply reply;
  grpc::Status rpc = stub->TemplateRemove(&ctx, req, &reply);
  if (!rpc.ok()) {
    std::cerr << "phos: template rm " << name << ": " << rpc.error_message() << "\n";
    return 1;
  }
  std::cout << "removed template " << name << " (" << reply.removed_dir() << ")\n";
  return 0;
}

}  // namespace

void AddTemplateCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  CLI::App* group = app->add_subcommand(
      "template", "Serverless templates: save a process under a name, start new instances from it.");
  group->require_subcommand(1);

  auto save = std::make_shared<TemplateArgs>();
  CLI::App* s = group->add_subcommand(
      "save", "Save a process running under phos as template NAME (whole process: GPU state + CRIU, root), "
              "replacing an older NAME once the new one is committed. The process is then ended (--kill, the "
              "default: it holds the template's device addresses, so no instance can start on this phosd while "
              "it runs; docs/templates.md) unless --leave-running.");
  s->add_option("name", save->name, "Template name ([A-Za-z0-9_.-])")->required();
  AddTargetOptions(s, &save->target, /*positional=*/false);
  AddModeOption(s, &save->mode, {"cow", "recopy", "stop"});
  AddEndOptions(s, &save->leave_running, &save->kill, /*kill_by_default=*/true);
  s->add_flag("--json", save->json, "Print every event as one JSON object per line");
  s->callback([global, save, exit_code] { *exit_code = RunSave(*global, *save); });

  auto start = std::make_shared<TemplateArgs>();
  CLI::App* st = group->add_subcommand(
      "start", "Start a new instance of template NAME from phosd's in-memory copy; prints `started pid N` "
               "as soon as it runs, then waits for it to exit and returns its exit status.");
  st->add_option("name", start->name, "Template name")->required();
  st->add_flag("--detach", start->detach, "Return as soon as the instance runs");
  st->add_flag("--json", start->json, "Print every event as one JSON object per line");
  st->callback([global, start, exit_code] { *exit_code = RunStart(*global, *start); });

  auto list_json = std::make_shared<bool>(false);
  CLI::App* ls = group->add_subcommand("list", "List the templates of this phosd.");
  ls->add_flag("--json", *list_json, "Print as JSON (for tools)");
  ls->callback([global, list_json, exit_code] { *exit_code = RunList(*global, *list_json); });

  auto rm_name = std::make_shared<std::string>();
  CLI::App* rm = group->add_subcommand("rm", "Remove template NAME (running instances are not affected).");
  rm->add_option("name", *rm_name, "Template name")->required();
  rm->callback([global, rm_name, exit_code] { *exit_code = RunRemove(*global, *rm_name); });
}

}  // namespace phos::cli
