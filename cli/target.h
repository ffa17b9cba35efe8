// How a command names the process it acts on: a pid or a name, as a
// positional TARGET or with --pid. The pid may be the program's (as
// `phos ps` shows it) or that of the `phos run` that started it (the pid a
// shell's `$!` holds): phosd maps a launcher's pid to its program. A name
// is the one given to `phos run --name`; the CLI looks it up in
// `phos ps`'s list.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace phos::cli {

struct TargetArgs {
  std::string target;  // positional: PID or NAME
  std::string pid;     // --pid: PID or NAME too
};

/// Adds --pid and, with `positional` (commands that have no positional of
/// their own), TARGET to `cmd`; one of them must be given (ResolveTarget
/// checks, and says how).
void AddTargetOptions(CLI::App* cmd, TargetArgs* args, bool positional = true);

/// The pid to send to phosd, or 0 after printing why not ("phos: ..."):
/// neither given, both given, or no session has that name.
int ResolveTarget(const GlobalOptions& global, const TargetArgs& args, const std::string& command);

}  // namespace phos::cli
