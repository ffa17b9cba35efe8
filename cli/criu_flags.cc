#include "cli/criu_flags.h"

namespace phos::cli {

void AddCriuFlags(CLI::App* cmd, CriuFlags* flags, bool restore) {
  const std::string when = restore ? " (added to what the image's dump used, which is applied anyway)" : "";
  cmd->add_flag("--shell-job", flags->shell_job,
                "CRIU --shell-job: the process may belong to a session or terminal outside it (phosd sets it "
                "itself for a process that is not its session leader)" + when);
  cmd->add_flag("--tcp-established", flags->tcp_established,
                "CRIU --tcp-established: dump and restore its established TCP connections (the peers must "
                "not send meanwhile; restore on a host with the same addresses)" + when);
  cmd->add_flag("--file-locks", flags->file_locks,
                "CRIU --file-locks: dump and restore the file locks it holds (CRIU refuses a process holding "
                "one without it)" + when);
}

void ToProto(const CriuFlags& flags, v1::CriuOptions* out) {
  out->set_shell_job(flags.shell_job);
  out->set_tcp_established(flags.tcp_established);
  out->set_file_locks(flags.file_locks);
}

}  // namespace phos::cli
