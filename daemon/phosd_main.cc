// phosd: the phos daemon as its own binary (same flags as `phos daemon`).
#include <iostream>

#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "server/daemon.h"
#include "server/daemon_flags.h"

int main(int argc, char** argv) {
  phos::server::DaemonOptions options;
  phos::server::DaemonFlagValues raw;
  CLI::App app{"phosd: the phos daemon; owns the GPUs and serves phos clients"};
  phos::server::AddDaemonFlags(&app, &options, &raw);
  CLI11_PARSE(app, argc, argv);
  phos::Status s = phos::server::FinishDaemonFlags(raw, &options);
  if (s.ok()) s = phos::InitLogging(options.log_level);
  if (!s.ok()) {
    std::cerr << "phosd: " << s.message() << "\n";
    return 2;
  }
  return phos::server::RunDaemonUntilSignal(options);
}
