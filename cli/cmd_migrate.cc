// phos migrate PID|NAME --to HOST:PORT --peer-token FILE [--mode recopy|stop]
// [--rounds N] [--max-rate R] [--lazy-pages] [--job] [--json]: live-migrate a process under phos
// to another phosd (started with --listen and the same token). The local
// phosd does the work (server/migration.h); this prints its progress, the
// new pid at the destination and the downtime. docs/migration.md.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/criu_flags.h"
#include "cli/checkpoint_options.h"
#include "cli/operation_stream.h"
#include "cli/target.h"
#include "peer/peer_token.h"

namespace phos::cli {
namespace {

struct MigrateArgs {
  TargetArgs target;
  std::string to, token_file, mode = "recopy";
  unsigned rounds = 0;
  std::uint64_t max_rate = 0;
  bool no_precopy = false;
  bool job = false;
  std::vector<std::string> phosd_map;  // "FROM=TO" (peer endpoints)
  bool lazy_pages = false;
  CriuFlags criu;
  bool json = false;
};

int RunMigrate(const GlobalOptions& global, const MigrateArgs& a) {
  std::string token;
  if (Status s = peer::LoadPeerToken(a.token_file, &token); !s.ok()) {
    std::cerr << "phos: migrate: " << s.message() << "\n";
    return 1;
  }
  const int pid = ResolveTarget(global, a.target, "migrate");
  if (pid == 0) return 2;
  v1::MigrateRequest req;
  req.set_pid(pid);
  req.set_destination(a.to);
  req.set_peer_token(token);
  req.set_mode(ModeFromName(a.mode));
  req.set_max_precopy_rounds(a.rounds);
  req.set_max_bytes_per_sec(a.max_rate);
  req.set_no_precopy(a.no_precopy);
  req.set_job(a.job);
  req.set_lazy_pages(a.lazy_pages);
  if (!a.phosd_map.empty() && !a.job) {
    std::cerr << "phos: migrate: --phosd-map moves the ranks of a job across phosds: it needs --job\n";
    return 2;
  }
  for (const std::string& m : a.phosd_map) {
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      std::cerr << "phos: migrate: --phosd-map takes FROM=TO (the HOST:PORT of a phosd running ranks of the job, "
                   "and of the phosd they go to), got '" << m << "'\n";
      return 2;
    }
    (*req.mutable_phosd_map())[m.substr(0, eq)] = m.substr(eq + 1);
  }
  ToProto(a.criu, req.mutable_criu());
  std::unique_ptr<v1::Phos::Stub> stub;
  if (!ConnectOrExplain(global.socket_path, global.connect_timeout_ms, &stub)) return 1;
  grpc::ClientContext ctx;
  auto reader = stub->Migrate(&ctx, req);
  v1::OperationResult result;
  const int rc = ShowOperation(reader.get(), "Migrate", "migrate", a.json, &result);
  if (rc != 0) return rc;
  if (!a.json && a.job) {
    const auto& c = result.counters();
    auto get = [&c](const char* k) { return c.count(k) ? c.at(k) : 0; };
    std::cout << "migrated the job of pid " << pid << " (" << result.rank_pids_size() << " ranks) to " << a.to;
    for (const std::string& m : a.phosd_map) std::cout << ", " << m;
    std::cout << ": pids";
    for (int p : result.rank_pids()) std::cout << " " << p;
    std::cout << " there (rank order)\n"
              << "  downtime " << get("downtime_us") / 1000.0 << " ms (ranks ended here -> all running there): "
              << "transfer " << get("transfer_ms") << " ms of " << result.bytes_written() << " bytes; the cut took "
              << get("cut_us") / 1000.0 << " ms\n";
    return 0;
  }
  if (!a.json) {
    const auto& c = result.counters();
    auto get = [&c](const char* k) { return c.count(k) ? c.at(k) : 0; };
    std::cout << "migrated pid " << pid << " to " << a.to << " as pid " << result.pid() << "\n"
              << "  downtime " << get("downtime_us") / 1000.0 << " ms (frozen here -> running there): criu dump "
              << get("criu_dump_ms") << " ms, transfer " << get("transfer_ms") << " ms, restore there: criu "
              << get("destination_criu_restore_ms") << " ms + gpu " << get("destination_gpu_restore_us") / 1000.0
              << " ms; " << get("dirty_bytes_at_stop") << " bytes were dirty at the freeze\n"
              << "  pre-copy: " << get("precopy_bytes_sent") << " bytes sent while it ran; after the freeze "
              << get("bytes_after_stop") << " of the image's " << result.bytes_written() << " bytes crossed ("
              << get("precopied_bytes") << " came from the pre-copy)\n";
    if (a.lazy_pages) {
      std::cout << "  lazy pages: its memory was not in the downtime; it arrived " << get("lazy_pages_ms")
                << " ms after it ran there\n";
    }
  }
  return 0;
}

}  // namespace

void AddMigrateCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto a = std::make_shared<MigrateArgs>();
  CLI::App* cmd = app->add_subcommand(
      "migrate",
      "Live-migrate a process (GPU state + CRIU) to another phosd: recopy rounds while it runs stream its "
      "buffers to the destination, then it is frozen, dumped, what changed is sent, and it is restored there; it is killed here only after the destination runs it. On any "
      "failure it resumes here. Prints the new pid and the downtime.");
  AddTargetOptions(cmd, &a->target);
  cmd->add_option("--to", a->to, "The destination phosd's --listen address, HOST:PORT")->required();
  cmd->add_option("--peer-token", a->token_file, "File holding the destination's peer token (mode 0600)")
      ->required();
  AddModeOption(cmd, &a->mode, {"recopy", "stop"});
  cmd->add_flag("--job", a->job,
                "Move the whole NCCL job of this process: one job checkpoint at a consistent cut, every rank ended "
                "once it is committed, the job image sent, every rank restored at its destination; if that fails, "
                "the job is restored where it ran from that image. This phosd's ranks go to --to; a job across "
                "phosds (--etcd) also needs --phosd-map for the others'");
  cmd->add_option("--phosd-map", a->phosd_map,
                  "FROM=TO[,FROM=TO...]: --job across phosds: the ranks running on the phosd at FROM (HOST:PORT, "
                  "as `phos ps` on it shows its --listen) go to the phosd at TO (FROM=FROM leaves them there); "
                  "each destination takes one phosd's ranks; checked, with every destination pinged, before any "
                  "rank is held")
      ->delimiter(',');
  cmd->add_option("--rounds", a->rounds, "Most recopy rounds before the freeze (default: phosd's --recopy-rounds)");
  cmd->add_option("--max-rate", a->max_rate, "Cap on the transfer's bytes per second, e.g. 100M (default: none)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_flag("--no-precopy", a->no_precopy,
                "Recopy: do not stream buffer copies to the destination while the app runs; send the whole image "
                "after the freeze (longer downtime; a baseline for comparisons)");
  cmd->add_flag("--lazy-pages", a->lazy_pages,
                "Leave the process's memory out of the downtime (CRIU lazy migration): it runs at the destination "
                "at once and its pages are faulted in from here over the data channel while this copy stays "
                "frozen; the migration ends once every page arrived. Needs userfaultfd at the destination and "
                "fs.pipe-max-size >= 4 MiB here (docs/migration.md \"Lazy pages\")");
  AddCriuFlags(cmd, &a->criu);
  cmd->add_flag("--json", a->json, "Print every event as one JSON object per line");
  cmd->callback([global, a, exit_code] { *exit_code = RunMigrate(*global, *a); });
}

}  // namespace phos::cli
