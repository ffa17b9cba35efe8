// The CRIU options a user can ask for on the commands that dump or restore
// a whole process (`phos checkpoint`, `phos restore`, `phos migrate`):
// --shell-job, --tcp-established, --file-locks (CriuOptions in
// proto/phos.proto; docs/criu.md "Options"). One place so every command
// spells and explains them the same way.
#pragma once

#include <CLI/CLI.hpp>

#include "phos.pb.h"

namespace phos::cli {

struct CriuFlags {
  bool shell_job = false;
  bool tcp_established = false;
  bool file_locks = false;
};

/// Registers the three flags on `cmd`; `restore` words the help for a restore.
void AddCriuFlags(CLI::App* cmd, CriuFlags* flags, bool restore = false);
void ToProto(const CriuFlags& flags, v1::CriuOptions* out);

}  // namespace phos::cli
