// CriuClient's lazy-migration calls (criu_client.h "Lazy migration"): the
// three criu commands, run from the command line because libcriu 4.1.1
// cannot ask for lazy pages (criu_command.h).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "criu/criu_client.h"
#include "criu/criu_command.h"
#include "criu/criu_internal.h"

namespace phos::criu {
namespace {

using detail::CheckLogFile;
using detail::CheckNoImages;
using detail::DirFd;
using detail::OpenDir;

// How long a lazy dump may take to write its images (the freeze, the
// parasite, everything but the pages), and a restore to recreate the
// process: both are milliseconds to seconds; these only bound a hang.
constexpr std::chrono::minutes kImagesTimeout{5};
// `criu lazy-pages` is ready as soon as it has read the images.
constexpr std::chrono::seconds kDaemonReadyTimeout{60};

std::string LogLevelArg(int level) { return "-v" + std::to_string(level < 0 ? 0 : level > 4 ? 4 : level); }

/// The CRIU options both dump and restore take, as command-line flags.
void AddProcessFlags(bool shell_job, bool tcp_established, bool file_locks, bool ext_unix_sk,
                     const std::vector<std::string>& external, std::vector<std::string>* args) {
  if (shell_job) args->push_back("--shell-job");
  if (tcp_established) args->push_back("--tcp-established");
  if (file_locks) args->push_back("--file-locks");
  if (ext_unix_sk) args->push_back("--ext-unix-sk");
  for (const std::string& e : external) {
    args->push_back("--external");
    args->push_back(e);
  }
}

}  // namespace

Status CriuClient::StartLazyDump(pid_t pid, const std::string& images_dir, const DumpOptions& opts, int page_fd,
                                 std::unique_ptr<CriuCommand>* dump) {
  const std::string what = "lazy criu dump of pid " + std::to_string(pid) + " into " + images_dir;
  if (pid <= 0) return Status::InvalidArgument(what + ": invalid pid");
  if (page_fd < 0) return Status::InvalidArgument(what + ": no page connection");
  if (opts.track_mem || !opts.parent_dir.empty() || !opts.external_unix_sk_inodes.empty()) {
    return Status::InvalidArgument(what + ": a lazy dump takes no track_mem, parent_dir or "
                                          "external_unix_sk_inodes (use `external`)");
  }
  PHOS_RETURN_IF_ERROR(CheckLogFile(what, opts.log_file));
  PHOS_RETURN_IF_ERROR(CheckLazyDumpPrerequisites());
  DirFd images;
  PHOS_RETURN_IF_ERROR(OpenDir(what, images_dir, /*create=*/true, &images));
  PHOS_RETURN_IF_ERROR(CheckNoImages(what, images_dir));
  DirFd work;
  if (!opts.work_dir.empty()) PHOS_RETURN_IF_ERROR(OpenDir(what, opts.work_dir, /*create=*/true, &work));

  CriuCommand::Spec spec;
  spec.binary = opts.criu_binary;
  spec.what = what;
  spec.log_path = (opts.work_dir.empty() ? images_dir : opts.work_dir) + "/" + opts.log_file;
  spec.status_fd = true;  // written once the images are out and the page server serves
  spec.inherit_fds = {page_fd};
  spec.args = {"dump", "-t", std::to_string(pid), "-D", images_dir, "-o", opts.log_file,
               LogLevelArg(opts.log_level), "--lazy-pages", "--ps-socket", std::to_string(page_fd)};
  if (!opts.work_dir.empty()) {
    spec.args.push_back("-W");
    spec.args.push_back(opts.work_dir);
  }
  if (opts.leave_running) spec.args.push_back("-R");
  AddProcessFlags(opts.shell_job, opts.tcp_established, opts.file_locks, opts.ext_unix_sk, opts.external,
                  &spec.args);
  if (opts.timeout_s != 0) {
    spec.args.push_back("--timeout");
    spec.args.push_back(std::to_string(opts.timeout_s));
  }
  // The freeze and the parasite are where two dumps collide: held until the
  // images are out (the page serving after it touches no task).
  std::unique_lock<std::mutex> one_dump(detail::OneDumpMutex());
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CriuCommand> cmd;
  PHOS_RETURN_IF_ERROR(CriuCommand::Start(std::move(spec), &cmd));
  Status s = cmd->WaitReady(kImagesTimeout);
  one_dump.unlock();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) {
    cmd->Kill();  // a hang: CRIU lets go of the task when it dies
    detail::ForgetCheck(opts.criu_binary);
    spdlog::warn("criu: {} failed ({:.1f} ms): {}", what, ms, s.ToString());
    return s;
  }
  spdlog::info("criu: lazy dump of pid {} into {}: images written, serving its memory (criu pid {}, {:.1f} ms)",
               pid, images_dir, cmd->pid(), ms);
  *dump = std::move(cmd);
  return Status::Ok();
}

Status CriuClient::StartLazyPages(const std::string& images_dir, int page_fd, const std::string& criu_binary,
                                  std::unique_ptr<CriuCommand>* daemon) {
  const std::string what = "criu lazy-pages for " + images_dir;
  if (page_fd < 0) return Status::InvalidArgument(what + ": no page connection");
  DirFd images;
  PHOS_RETURN_IF_ERROR(OpenDir(what, images_dir, /*create=*/false, &images));
  CriuCommand::Spec spec;
  spec.binary = criu_binary;
  spec.what = what;
  spec.log_path = images_dir + "/criu-lazy-pages.log";
  spec.status_fd = true;  // written once it listens for the restore
  spec.inherit_fds = {page_fd};
  spec.args = {"lazy-pages", "-D", images_dir, "-o", "criu-lazy-pages.log", "-v4",
               "--page-server", "--ps-socket", std::to_string(page_fd)};
  std::unique_ptr<CriuCommand> cmd;
  PHOS_RETURN_IF_ERROR(CriuCommand::Start(std::move(spec), &cmd));
  if (Status s = cmd->WaitReady(kDaemonReadyTimeout); !s.ok()) {
    cmd->Kill();
    return s;
  }
  *daemon = std::move(cmd);
  return Status::Ok();
}

namespace detail {

Status RestoreLazy(const std::string& images_dir, const RestoreOptions& opts, pid_t* restored_pid) {
  const std::string what = "lazy criu restore from " + images_dir;
  if (!opts.detach || !opts.work_dir.empty()) {
    return Status::InvalidArgument(what + ": a lazy restore is detached and works in the images directory (where "
                                          "`criu lazy-pages` listens)");
  }
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(images_dir, ec).string();
  const std::string pidfile = dir + "/criu-restore.pid";
  std::filesystem::remove(pidfile, ec);

  CriuCommand::Spec spec;
  spec.binary = opts.criu_binary;
  spec.what = what;
  spec.log_path = images_dir + "/" + opts.log_file;
  spec.args = {"restore", "-D", dir, "-o", opts.log_file, LogLevelArg(opts.log_level), "--lazy-pages",
               "-d", "--pidfile", pidfile};
  AddProcessFlags(opts.shell_job, opts.tcp_established, opts.file_locks, opts.ext_unix_sk, opts.external,
                  &spec.args);
  for (const auto& [fd, key] : opts.inherit_fds) {
    spec.inherit_fds.push_back(fd);
    spec.args.push_back("--inherit-fd");
    spec.args.push_back("fd[" + std::to_string(fd) + "]:" + key);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CriuCommand> cmd;
  PHOS_RETURN_IF_ERROR(CriuCommand::Start(std::move(spec), &cmd));
  Status s = cmd->Wait(kImagesTimeout);
  if (!s.ok()) {
    cmd->Kill();
    ForgetCheck(opts.criu_binary);
    return s;
  }
  pid_t pid = 0;
  {
    std::ifstream f(pidfile);
    f >> pid;
  }
  std::filesystem::remove(pidfile, ec);
  if (pid <= 0) return Status::Internal(what + ": criu exited 0 but wrote no pid to " + pidfile);
  *restored_pid = pid;
  spdlog::info("criu: lazy restore ok dir={} pid={} ms={:.1f}", images_dir, pid,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return Status::Ok();
}

}  // namespace detail
}  // namespace phos::criu
