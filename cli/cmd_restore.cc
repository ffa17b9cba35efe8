// phos restore DIR --gpu-only --pid P [--stop-the-world] [--json]: roll the GPU state of a
// running process back to a GPU-only image (in place; every checksum is
// verified before the process is touched). Whole-process restore (CRIU)
// comes later.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/operation_stream.h"

namespace phos::cli {
namespace {

struct RestoreArgs {
  std::string dir;
  int pid = 0;
  bool gpu_only = false;
  bool concurrent = true;
  bool json = false;
};

int RunRestore(const GlobalOptions& global, const RestoreArgs& a) {
  if (!a.gpu_only) {
    std::cerr << "phos: restoring a whole process (CRIU) is not implemented yet; use --gpu-only --pid P to roll "
                 "a running process's GPU state back to the image\n";
    return 2;
  }
  if (a.pid <= 0) {
    std::cerr << "phos: --gpu-only restores in place into a running process: give its --pid\n";
    return 2;
  }
  v1::RestoreRequest req;
  req.set_image_dir(std::filesystem::absolute(a.dir).lexically_normal().string());
  req.set_gpu_only(true);
  req.set_pid(a.pid);
  req.set_concurrent(a.concurrent);
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  auto reader = stub->Restore(&ctx, req);
  return ShowOperation(reader.get(), "Restore", "restore", a.json);
}

}  // namespace

void AddRestoreCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto a = std::make_shared<RestoreArgs>();
  CLI::App* cmd = app->add_subcommand("restore", "Restore a process (GPU state, in place) from an image.");
  cmd->add_option("dir", a->dir, "Image directory (from `phos checkpoint`)")->required();
  cmd->add_option("--pid", a->pid, "The running process to roll back (see `phos ps`)");
  cmd->add_flag("--gpu-only", a->gpu_only, "Restore the GPU state only, in place. Required for now.");
  cmd->add_flag("--concurrent,!--stop-the-world", a->concurrent,
                "--concurrent (default): the process resumes at once and buffers load in the background "
                "in the order it first used them (a call needing one waits for it); --stop-the-world: "
                "the process waits until everything is loaded");
  cmd->add_flag("--json", a->json, "Print every event as one JSON object per line");
  cmd->callback([global, a, exit_code] { *exit_code = RunRestore(*global, *a); });
}

}  // namespace phos::cli
