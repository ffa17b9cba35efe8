// phos checkpoint PID|NAME [--gpu-only | --job] [--mode cow|recopy|stop] [--out DIR]
// [--unvalidated trust|stop] [--leave-running|--kill] [--json]: checkpoint a
// process running under phos — its GPU state, and without --gpu-only its
// CPU state through CRIU (docs/criu.md "Whole-process checkpoint and
// restore"); the app keeps running unless --kill.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/criu_flags.h"
#include "cli/checkpoint_options.h"
#include "cli/operation_stream.h"
#include "cli/target.h"

namespace phos::cli {
namespace {

struct CheckpointArgs {
  TargetArgs target;
  bool gpu_only = false;
  bool job = false;
  std::string mode = "cow";
  bool leave_running = false;  // the default; the flag only says so
  bool kill = false;
  std::string out;
  std::string keep = "manual";
  std::string unvalidated;  // "" = the daemon's --unvalidated
  std::string name;
  double metric = 0;
  bool has_metric = false;
  bool lower_is_better = false;
  unsigned keep_count = 0;
  CriuFlags criu;
  bool json = false;
};

int RunCheckpoint(const GlobalOptions& global, const CheckpointArgs& a) {
  const int pid = ResolveTarget(global, a.target, "checkpoint");
  if (pid == 0) return 2;
  v1::CheckpointRequest req;
  req.set_pid(pid);
  req.set_gpu_only(a.gpu_only);
  req.set_job(a.job);
  req.set_leave_running(!a.kill);
  req.set_kill(a.kill);
  ToProto(a.criu, req.mutable_criu());
  req.set_mode(ModeFromName(a.mode));
  if (a.unvalidated == "trust") req.set_unvalidated(v1::UNVALIDATED_TRUST);
  if (a.unvalidated == "stop") req.set_unvalidated(v1::UNVALIDATED_STOP);
  if (a.keep == "latest") req.set_keep(v1::KEEP_LATEST);
  else if (a.keep == "best") req.set_keep(v1::KEEP_BEST);
  else req.set_keep(v1::KEEP_MANUAL);
  if (a.keep == "best" && !a.has_metric) {
    std::cerr << "phos: --keep best ranks images by a metric: give it with --metric VALUE\n";
    return 2;
  }
  if (a.has_metric) req.set_metric_value(a.metric);
  req.set_metric_lower_is_better(a.lower_is_better);
  req.set_keep_count(a.keep_count);
  req.set_name(a.name);
  if (!a.out.empty()) req.set_out_dir(std::filesystem::absolute(a.out).lexically_normal().string());
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  auto reader = stub->Checkpoint(&ctx, req);
  return ShowOperation(reader.get(), "Checkpoint", "checkpoint", a.json);
}

}  // namespace

void AddCheckpointCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto a = std::make_shared<CheckpointArgs>();
  CLI::App* cmd = app->add_subcommand(
      "checkpoint",
      "Checkpoint a process running under phos into an image directory; it keeps running (default) or, with "
      "--kill, is ended once the image is committed.");
  AddTargetOptions(cmd, &a->target);
  cmd->add_flag("--gpu-only", a->gpu_only,
                "Save the GPU state only (no CRIU). Default: the whole process — its GPU state and, "
                "through CRIU (root), its CPU state in DIR/criu/; the app keeps running either way");
  cmd->add_flag("--job", a->job,
                "Checkpoint the whole NCCL job of this process (every process sharing a communicator with it) "
                "at one consistent cut: DIR/rank-<R>/ per rank, DIR/job written last; `phos restore DIR` brings "
                "every rank back. With --kill every rank is ended, by the phosd it runs on, once DIR is committed")
      ->excludes("--gpu-only");
  AddModeOption(cmd, &a->mode, {"cow", "recopy", "stop"});
  AddEndOptions(cmd, &a->leave_running, &a->kill, /*kill_by_default=*/false);
  cmd->add_option("--unvalidated", a->unvalidated,
                  "Kernels without PTX during the checkpoint: trust (use their speculated access set) or "
                  "stop (handle them stop-the-world); default: phosd's --unvalidated")
      ->check(CLI::IsMember({"trust", "stop"}));
  cmd->add_option("--out", a->out,
                  "Image directory (must not exist); default <state dir>/checkpoints/<pid>-<time>");
  cmd->add_option("--keep", a->keep,
                  "Lifecycle class: manual (never deleted by phos), latest (phos keeps the newest "
                  "--keep-count images of this class), best (keeps the --keep-count best by --metric). "
                  "Applies to images in the checkpoint root (no --out)")
      ->check(CLI::IsMember({"manual", "latest", "best"}))
      ->capture_default_str();
  cmd->add_option("--keep-count", a->keep_count, "How many images --keep latest/best keeps (default 3)");
  cmd->add_option("--metric", a->metric, "The image's metric for --keep best (e.g. validation accuracy)")
      ->each([a](const std::string&) { a->has_metric = true; });
  cmd->add_flag("--lower-is-better", a->lower_is_better, "--keep best: smaller metrics are better (a loss)");
  cmd->add_option("--name", a->name, "Image name in the checkpoint root (default <pid>-<UTC time>)");
  AddCriuFlags(cmd, &a->criu);
  cmd->add_flag("--json", a->json, "Print every event as one JSON object per line");
  cmd->callback([global, a, exit_code] { *exit_code = RunCheckpoint(*global, *a); });
}

}  // namespace phos::cli
