// The command-line flags of `phos daemon` (and the phosd binary), in one
// place so both accept exactly the same ones.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "server/daemon_options.h"

namespace phos::server {

/// Raw flag values that need checking after parsing.
struct DaemonFlagValues {
  std::string backend = "auto";
  std::string sim_va_base;  // hex text, empty = default
};

void AddDaemonFlags(CLI::App* app, DaemonOptions* options, DaemonFlagValues* raw);
/// Validates and converts raw values into `options`.
Status FinishDaemonFlags(const DaemonFlagValues& raw, DaemonOptions* options);

}  // namespace phos::server
