// phos: the command-line front end of phos (docs/control-plane.md).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/version.h"
#include "common/socket_path.h"

int main(int argc, char** argv) {
  // `phos daemon ...` is phosd (the CLI does not link the daemon).
  if (const int rc = phos::cli::ExecDaemonIfAsked(argc, argv); rc >= 0) return rc;
  CLI::App app{
      "phos: checkpoint, restore and live-migrate running GPU processes while they keep "
      "running.\nStart the daemon with `phos daemon`, then use the other commands."};
  app.set_version_flag("--version", phos::VersionString());
  app.require_subcommand(1);
  // Let `phos status --socket X` reach the top-level --socket.
  app.fallthrough();

  phos::cli::GlobalOptions global;
  global.socket_path = phos::DefaultSocketPath();
  app.add_option("--socket", global.socket_path,
                 "phosd's control socket (default $PHOS_SOCKET or /run/phos/phosd.sock)")
      ->capture_default_str();

  int exit_code = 0;
  phos::cli::AddDaemonCommand(&app);
  phos::cli::AddStatusCommand(&app, &global, &exit_code);
  phos::cli::AddPsCommand(&app, &global, &exit_code);
  phos::cli::AddRunCommand(&app, &global, &exit_code);
  phos::cli::AddInspectCommand(&app, &exit_code);
  phos::cli::AddCheckpointCommand(&app, &global, &exit_code);
  phos::cli::AddRestoreCommand(&app, &global, &exit_code);
  phos::cli::AddSendImageCommand(&app, &exit_code);
  phos::cli::AddMigrateCommand(&app, &global, &exit_code);
  phos::cli::AddTemplateCommand(&app, &global, &exit_code);

  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
