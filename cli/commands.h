// The `phos` subcommands. Each Add*Command registers a subcommand on the app
// and the callback that runs it; the callback sets *exit_code.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace phos::cli {

/// Options every subcommand shares.
struct GlobalOptions {
  std::string socket_path;
  int connect_timeout_ms = 2000;
};

/// `phos daemon ARGS` is phosd: when argv asks for it, execs phosd (never
/// returns on success; 127 when it cannot), else returns -1 (cmd_daemon.cc).
int ExecDaemonIfAsked(int argc, char** argv);
/// Lists `daemon` in `phos --help` (ExecDaemonIfAsked runs it).
void AddDaemonCommand(CLI::App* app);
void AddStatusCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);
void AddPsCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);
/// phos run [--name NAME] [--lib PATH] [--] CMD ARGS... (cmd_run.cc).
void AddRunCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);
/// phos inspect DIR [--json] (cmd_inspect.cc): runs without a daemon.
void AddInspectCommand(CLI::App* app, int* exit_code);
/// phos checkpoint PID|NAME [--gpu-only] [--mode cow|recopy|stop] [--kill] [--out DIR] [--json] (cmd_checkpoint.cc).
void AddCheckpointCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);
/// phos restore DIR [--gpu-only --pid PID|NAME] [--json] (cmd_restore.cc).
void AddRestoreCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);
/// phos send-image DIR --to HOST:PORT --peer-token FILE [--name N] (cmd_send_image.cc): no daemon needed.
void AddSendImageCommand(CLI::App* app, int* exit_code);
// phos migrate (cmd_migrate.cc).
void AddMigrateCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);
/// phos template save|start|list|rm (cmd_template.cc, docs/templates.md).
void AddTemplateCommand(CLI::App* app, const GlobalOptions* global, int* exit_code);

}  // namespace phos::cli
