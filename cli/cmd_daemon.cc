// phos daemon ARGS...: runs phosd in the foreground — by exec'ing the phosd
// binary installed beside phos with the same arguments, so the CLI does not
// link the daemon (and `phos daemon` and `phosd` can never differ). Its
// pid, signals and exit status are phosd's own.
//
// phosd is looked up as $PHOSD (a path), then beside phos: DIR/phosd,
// DIR/../daemon/phosd (the build tree), DIR/../sbin/phosd,
// DIR/../libexec/phos/phosd, then on PATH.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/self_dir.h"

namespace phos::cli {
namespace {

std::string FindPhosd() {
  if (const char* env = std::getenv("PHOSD"); env != nullptr && env[0] != '\0') return env;
  const std::string dir = SelfDir();
  for (const char* rel : {"/phosd", "/../daemon/phosd", "/../sbin/phosd", "/../libexec/phos/phosd"}) {
    const std::string p = dir + rel;
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p;
  }
  return "phosd";  // execvp: PATH
}

}  // namespace

int ExecDaemonIfAsked(int argc, char** argv) {
  // `phos [--socket S | --socket=S] daemon ARGS...`: the global --socket
  // before the subcommand is the daemon's --socket too.
  std::vector<std::string> global;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--socket" && i + 1 < argc) {
      global = {"--socket", argv[++i]};
    } else if (a.rfind("--socket=", 0) == 0) {
      global = {a};
    } else {
      break;
    }
  }
  if (i >= argc || std::string(argv[i]) != "daemon") return -1;
  const std::string phosd = FindPhosd();
  std::vector<std::string> args = {phosd};
  args.insert(args.end(), global.begin(), global.end());
  for (int k = i + 1; k < argc; ++k) args.emplace_back(argv[k]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execvp(phosd.c_str(), cargs.data());
  std::cerr << "phos daemon: cannot run " << phosd << ": " << std::strerror(errno)
            << " (phosd is installed beside phos; $PHOSD names another)\n";
  return 127;
}

void AddDaemonCommand(CLI::App* app) {
  // Listed in `phos --help`; ExecDaemonIfAsked runs it before parsing.
  app->add_subcommand("daemon",
                      "Run phosd in the foreground: it owns the GPUs and serves `phos` commands over a unix socket. "
                      "Stop it with SIGTERM or Ctrl-C. `phos daemon --help` lists its flags (the same as phosd's).");
}

}  // namespace phos::cli
