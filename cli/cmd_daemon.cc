// phos daemon: run phosd in the foreground.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "common/logging.h"
#include "server/daemon.h"
#include "server/daemon_flags.h"

namespace phos::cli {

void AddDaemonCommand(CLI::App* app, int* exit_code) {
  auto options = std::make_shared<server::DaemonOptions>();
  auto raw = std::make_shared<server::DaemonFlagValues>();
  CLI::App* cmd = app->add_subcommand(
      "daemon",
      "Run phosd in the foreground: it owns the GPUs and serves `phos` commands over a unix "
      "socket. Stop it with SIGTERM or Ctrl-C.");
  server::AddDaemonFlags(cmd, options.get(), raw.get());
  cmd->callback([options, raw, exit_code] {
    Status s = server::FinishDaemonFlags(*raw, options.get());
    if (s.ok()) s = InitLogging(options->log_level);
    if (!s.ok()) {
      std::cerr << "phos daemon: " << s.message() << "\n";
      *exit_code = 2;
      return;
    }
    *exit_code = server::RunDaemonUntilSignal(*options);
  });
}

}  // namespace phos::cli
