// phos restore DIR [--detach] [--json]: restore a whole process (CRIU + its
// GPU state) from a whole-process image (docs/criu.md "Whole-process
// checkpoint and restore"); prints its pid and, without --detach, waits
// until it exits.
// phos restore DIR --gpu-only --pid PID|NAME [--stop-the-world] [--json]: roll the
// GPU state of a running process back to an image (in place; every
// checksum is verified before the process is touched).
#include <string>
#include <vector>
#include <cstdio>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/criu_flags.h"
#include "cli/operation_stream.h"
#include "cli/target.h"

namespace phos::cli {
namespace {

struct RestoreArgs {
  std::string dir;
  TargetArgs target;  // --gpu-only: the running process
  bool gpu_only = false;
  bool concurrent = true;
  bool detach = false;
  std::string verify = "auto";
  std::vector<std::string> device_map;  // "OLD=NEW"
  std::vector<std::string> phosd_map;   // "FROM=TO" (peer endpoints, or TO "here")
  CriuFlags criu;
  bool json = false;
};

int RunRestore(const GlobalOptions& global, const RestoreArgs& a) {
  if (a.gpu_only && a.target.pid.empty()) {
    std::cerr << "phos: --gpu-only restores in place into a running process: give its --pid\n";
    return 2;
  }
  if (!a.gpu_only && !a.target.pid.empty()) {
    std::cerr << "phos: --pid names the running process of a --gpu-only restore; a whole-process restore "
                 "recreates the image's process with its old pid\n";
    return 2;
  }
  v1::RestoreRequest req;
  req.set_image_dir(std::filesystem::absolute(a.dir).lexically_normal().string());
  req.set_gpu_only(a.gpu_only);
  ToProto(a.criu, req.mutable_criu());
  if (a.gpu_only) {
    const int pid = ResolveTarget(global, a.target, "restore");
    if (pid == 0) return 2;
    req.set_pid(pid);
  }
  req.set_concurrent(a.concurrent);
  req.set_detach(a.detach);
  req.set_verify(a.verify);
  for (const std::string& m : a.device_map) {
    int from = -1, to = -1;
    char extra = 0;
    if (std::sscanf(m.c_str(), "%d=%d%c", &from, &to, &extra) != 2 || from < 0 || to < 0) {
      std::cerr << "phos: --device-map takes OLD=NEW (phosd's GPU ordinals), got '" << m << "'\n";
      return 2;
    }
    (*req.mutable_device_map())[from] = to;
  }
  for (const std::string& m : a.phosd_map) {
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      std::cerr << "phos: --phosd-map takes FROM=TO (FROM a phosd's HOST:PORT as the job image names it, TO another "
                   "or 'here'), got '" << m << "'\n";
      return 2;
    }
    (*req.mutable_phosd_map())[m.substr(0, eq)] = m.substr(eq + 1);
  }
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  auto reader = stub->Restore(&ctx, req);
  v1::OperationResult result;
  // Without --detach the stream stays open until the process exits: a
  // "running" event prints "restored pid N" as soon as it runs.
  const int rc = ShowOperation(reader.get(), "Restore", "restore", a.json, &result);
  if (rc != 0 || a.gpu_only) return rc;
  if (a.detach || result.rank_pids_size() > 0) {  // a job's ranks always run on detached
    if (!a.json) std::cout << "restored pid " << result.pid() << "\n" << std::flush;
    return 0;
  }
  if (result.has_exit_status()) {
    if (!a.json) std::cout << "pid " << result.pid() << " exited with status " << result.exit_status() << "\n";
    return result.exit_status();
  }
  // phosd could not reap it (not its child): wait here, status unknown.
  if (!a.json) std::cout << "restored pid " << result.pid() << "\n" << std::flush;
  WaitForExit(result.pid());
  if (!a.json) {
    std::cout << "pid " << result.pid() << " exited (its exit status is unknown: phosd is not its parent)\n";
  }
  return 0;
}

}  // namespace

void AddRestoreCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto a = std::make_shared<RestoreArgs>();
  CLI::App* cmd = app->add_subcommand("restore", "Restore a process (or, --gpu-only, its GPU state) from an image.");
  cmd->add_option("dir", a->dir, "Image directory (from `phos checkpoint`)")->required();
  AddTargetOptions(cmd, &a->target, /*positional=*/false);  // --gpu-only: the running process to roll back
  cmd->add_flag("--gpu-only", a->gpu_only,
                "Restore the GPU state only, in place into the running --pid. Default: restore the whole "
                "process from a whole-process image (CRIU, root; its old pid must be free)");
  cmd->add_option("--device-map", a->device_map,
                  "OLD=NEW[,OLD=NEW...]: put what ran on the image's GPU OLD on this phosd's GPU NEW (same kind of "
                  "GPU; phosd's ordinals, as `phos ps` and `phos inspect` show them; each GPU a process used "
                  "needs one of its own); default: the same GPU")
      ->delimiter(',');
  cmd->add_option("--phosd-map", a->phosd_map,
                  "FROM=TO[,FROM=TO...]: job images: restore the ranks the phosd at FROM (HOST:PORT, as `phos "
                  "inspect` shows) took on the phosd at TO instead, or on this one with TO 'here' (e.g. after "
                  "losing a machine); each rank's image must be readable where it is restored")
      ->delimiter(',');
  cmd->add_flag("--detach", a->detach,
                "Whole-process restore: return once the process runs (default: wait until it exits and "
                "return its exit status)");
  cmd->add_flag("--concurrent,!--stop-the-world", a->concurrent,
                "--concurrent (default): the process resumes at once and buffers load in the background in "
                "the order it first used them (a call needing one waits for it); --stop-the-world: the "
                "process waits until everything is loaded");
  cmd->add_option("--verify", a->verify,
                  "When the image's checksums are checked: 'first' reads and checks all of gpu.img before "
                  "anything changes (the image is read twice); 'as-loaded' checks each chunk as it is loaded, "
                  "before it reaches the GPU (read once: a bad chunk fails the restore, a restored process is "
                  "killed, a --concurrent one has the calls that need an unloaded buffer refused); 'auto' "
                  "(default): first for --gpu-only (a running process's state would be lost), as-loaded "
                  "otherwise")
      ->check(CLI::IsMember({"auto", "first", "as-loaded"}))
      ->capture_default_str();
  AddCriuFlags(cmd, &a->criu, /*restore=*/true);
  cmd->add_flag("--json", a->json, "Print every event as one JSON object per line");
  cmd->callback([global, a, exit_code] { *exit_code = RunRestore(*global, *a); });
}

}  // namespace phos::cli
