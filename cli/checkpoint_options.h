// Options of the commands that checkpoint a process (checkpoint, migrate,
// template save), defined once: --mode (one list of names, one line each
// on what it costs the app, one mapping to the proto enum) and the
// --leave-running / --kill pair (what happens to the process once its
// image is committed).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "phos.pb.h"

namespace phos::cli {

/// Adds `--mode` to `cmd` with `*mode` as its default; `allowed` limits
/// the names (a subset of stop, cow, recopy, in that order of listing).
void AddModeOption(CLI::App* cmd, std::string* mode, const std::vector<std::string>& allowed);

/// "stop" -> MODE_STOP, "cow" -> MODE_COW, "recopy" -> MODE_RECOPY;
/// MODE_UNSPECIFIED for anything else.
v1::CheckpointMode ModeFromName(const std::string& name);

/// Adds --leave-running and --kill (exclusive) to `cmd`. Afterwards *kill
/// says whether to end the process once the image is committed: set by
/// --kill, cleared by --leave-running, else `kill_by_default`.
void AddEndOptions(CLI::App* cmd, bool* leave_running, bool* kill, bool kill_by_default);

}  // namespace phos::cli
