// phos run [--name NAME] [--job JOB] [--lib PATH] [--no-pid-ns] [--] CMD ARGS...: run an unmodified
// CUDA program against phosd by preloading libphos.so (docs/interposer.md
// "libphos.so and phos run"). A program that links the CUDA runtime
// statically (nvcc's default) runs that runtime over phos's driver API
// (libphos.so's export tables: docs/interposer.md "Export tables").
//
// Pid namespace (default when allowed, docs/criu.md "Pid namespaces"): the
// program runs as pid 1 of a new pid namespace and leads its own session,
// so CRIU can restore its image while the original still runs, any number
// of times, on any host (the restored copy gets a new pid namespace, so its
// pid can never collide). `phos run` stays as its parent in our namespace:
// it forwards signals and exits with the program's status.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/self_dir.h"

namespace phos::cli {
namespace {

bool IsExecutableFile(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

std::string ResolveOnPath(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return IsExecutableFile(cmd) ? cmd : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + cmd;
    if (IsExecutableFile(cand)) return cand;
    start = end + 1;
  }
  return "";
}


// A directory holding `libcuda.so.1` and `libcuda.so` as symlinks to
// libphos.so, put first on LD_LIBRARY_PATH: a program that dlopen()s the
// driver and dlsym()s through that handle (Triton, PyTorch's lazy driver
// loading) gets phos's driver exports instead of the real driver — the
// loader sees the same file as the preloaded library and returns it. The
// directory is per user and per libphos.so (by inode), mode 0700, and its
// owner is checked so another user cannot plant a library in it.
std::string DriverShimDir(const std::string& lib, std::string* error) {
  struct stat lib_st {};
  if (stat(lib.c_str(), &lib_st) != 0) {
    *error = "cannot stat " + lib + ": " + std::strerror(errno);
    return "";
  }
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string base = (runtime && runtime[0] == '/') ? std::string(runtime) : "/tmp";
  base += "/phos-" + std::to_string(getuid());
  const std::string dir = base + "/driver-shim-" + std::to_string(lib_st.st_dev) + "-" + std::to_string(lib_st.st_ino);
  for (const std::string& d : {base, dir}) {
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      *error = "cannot create " + d + ": " + std::strerror(errno);
      return "";
    }
    struct stat st {};
    if (lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 0077) != 0) {
      *error = d + " is not a private directory owned by uid " + std::to_string(getuid());
      return "";
    }
  }
  for (const char* name : {"libcuda.so.1", "libcuda.so"}) {
    const std::string link = dir + "/" + name;
    char target[4096];
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, n) == lib) continue;
    unlink(link.c_str());
    if (symlink(lib.c_str(), link.c_str()) != 0 && errno != EEXIST) {
      *error = "cannot create " + link + ": " + std::strerror(errno);
      return "";
    }
  }
  return dir;
}

/// phos's JIT shims (libphos-nvjitlink.so and libphos-nvrtc.so, with the
/// sonames libnvJitLink.so.13 and libnvrtc.so.13) beside libphos.so — in
/// the same directory (an install, the GPU bundle) or in the build tree's
/// interposer/jit — as an LD_PRELOAD list (":a:b"), "" when there is none.
/// Run preloads them so that a JIT-compiled cubin reaches phosd with its
/// PTX (docs/interposer.md "JIT-compiled kernels keep their PTX").
std::string JitShimsNextTo(const std::string& lib) {
  const std::string dir = lib.substr(0, lib.rfind('/'));
  std::string list;
  for (const char* shim : {"libphos-nvjitlink.so", "libphos-nvrtc.so"}) {
    for (const std::string& path : {dir + "/" + shim, dir + "/../jit/" + shim}) {
      char real[4096];
      if (access(path.c_str(), R_OK) == 0 && realpath(path.c_str(), real) != nullptr) {
        list += ":" + std::string(real);
        break;
      }
    }
  }
  return list;
}

/// True if `pid` has a handler for `sig` (SigCgt in /proc/PID/status).
bool CatchesSignal(pid_t pid, int sig) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return ((mask >> (sig - 1)) & 1ull) != 0;
  }
  return false;
}

/// The parent side of a pid-namespaced run: waits for `child` (pid 1 of its
/// namespace) and relays signals. The kernel drops signals whose action is
/// the default for a namespace's init, even from outside, so a signal the
/// program does not catch is turned into SIGKILL: the program then ends as
/// it would have without the namespace (its exit status says SIGKILL).
int SuperviseChild(pid_t child, const sigset_t& relayed) {
  for (;;) {
    siginfo_t info{};
    const int sig = sigwaitinfo(&relayed, &info);
    if (sig < 0) continue;  // EINTR
    if (sig == SIGCHLD) {
      int status = 0;
      const pid_t r = waitpid(child, &status, WNOHANG);
      if (r != child) continue;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      continue;
    }
    kill(child, CatchesSignal(child, sig) ? sig : SIGKILL);
  }
}

/// Tells phosd that this process launches a program (RegisterRun), so the
/// program's session shows our pid and `name`, and commands accept either.
/// With a name, failing is an error (the name would not work); without
/// one it only costs the convenience, so a phosd that is not there yet is
/// not (the program reports that itself when it makes its first call).
bool RegisterWithDaemon(const GlobalOptions& global, const std::string& name, const std::string& job) {
  struct stat st {};
  if (name.empty() && job.empty() && stat(global.socket_path.c_str(), &st) != 0) return true;
  std::unique_ptr<v1::Phos::Stub> stub;
  if (Status c = ConnectToDaemon(global.socket_path, global.connect_timeout_ms, &stub); !c.ok()) {
    if (name.empty() && job.empty()) return true;
    std::cerr << "phos run: cannot register the name '" << (name.empty() ? job : name) << "': " << c.message()
              << "\n";
    return false;
  }
  grpc::ClientContext ctx;
  v1::RegisterRunRequest req;
  req.set_launcher_pid(getpid());
  req.set_name(name);
  req.set_job(job);
  v1::RegisterRunReply reply;
  grpc::Status rpc = stub->RegisterRun(&ctx, req, &reply);
  if (rpc.ok()) return true;
  if (name.empty() && job.empty() && rpc.error_code() == grpc::StatusCode::UNIMPLEMENTED) return true;  // an older phosd
  std::cerr << "phos run: " << rpc.error_message() << "\n";
  return false;
}

int RunProgram(const GlobalOptions& global, std::string lib, std::vector<std::string> args, bool pid_ns,
               const std::string& name, const std::string& job) {
  if (!args.empty() && args.front() == "--") args.erase(args.begin());
  if (args.empty()) {
    std::cerr << "phos run: no command given (usage: phos run [--lib PATH] [--] CMD ARGS...)\n";
    return 2;
  }
  const std::string path = ResolveOnPath(args.front());
  if (path.empty()) {
    std::cerr << "phos run: " << args.front() << ": command not found (not an executable file on PATH)\n";
    return 127;
  }
  if (lib.empty()) {
    if (const char* env = std::getenv("PHOS_LIB"); env != nullptr && env[0] != '\0') lib = env;
  }
  if (lib.empty()) {
    const std::string dir = SelfDir();
    for (const char* rel : {"/../interposer/client/libphos.so", "/../lib/libphos.so", "/../lib/phos/libphos.so",
                            "/libphos.so"}) {
      if (access((dir + rel).c_str(), R_OK) == 0) {
        char real[4096];
        lib = realpath((dir + rel).c_str(), real) ? std::string(real) : dir + rel;
        break;
      }
    }
  }
  if (lib.empty() || access(lib.c_str(), R_OK) != 0) {
    std::cerr << "phos run: libphos.so not found" << (lib.empty() ? "" : " at " + lib)
              << " (give it with --lib or $PHOS_LIB)\n";
    return 2;
  }
  if (char real[4096]; realpath(lib.c_str(), real) != nullptr) lib = real;  // the shim's symlinks need it absolute
  std::string preload = lib;
  preload += JitShimsNextTo(lib);
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0') preload += ":" + std::string(old);
  setenv("LD_PRELOAD", preload.c_str(), 1);
  std::string shim_error;
  const std::string shim = DriverShimDir(lib, &shim_error);
  if (shim.empty()) {
    std::cerr << "phos run: warning: no driver shim (" << shim_error
              << "); a program that dlopen()s libcuda.so.1 itself will not be interposed\n";
  } else {
    std::string path_list = shim;
    if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && old[0] != '\0')
      path_list += ":" + std::string(old);
    setenv("LD_LIBRARY_PATH", path_list.c_str(), 1);
  }
  setenv("PHOS_SOCKET", global.socket_path.c_str(), 1);
  if (!RegisterWithDaemon(global, name, job)) return 1;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (pid_ns) {
    // unshare(CLONE_NEWPID) puts our NEXT child in the new namespace (as
    // its pid 1). Needs CAP_SYS_ADMIN: without it run as before (a
    // whole-process image is then restorable only once the pid is free).
    if (unshare(CLONE_NEWPID) == 0) {
      sigset_t relayed;
      sigemptyset(&relayed);
      for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGALRM})
        sigaddset(&relayed, s);
      sigset_t old;
      sigprocmask(SIG_BLOCK, &relayed, &old);
      const pid_t child = fork();
      if (child < 0) {
        std::cerr << "phos run: fork: " << std::strerror(errno) << "\n";
        return 126;
      }
      if (child == 0) {
        sigprocmask(SIG_SETMASK, &old, nullptr);
        // No PR_SET_PDEATHSIG: CRIU restores it, and a restored copy's
        // parent at restore time (criu swrk) exits at once — it would kill
        // every restored copy. SIGKILL of `phos run` itself (uncatchable,
        // not relayed) therefore leaves the program running; kill the
        // program (its pid in `phos ps`) instead.
        // Its own session: CRIU then needs no --shell-job, and a restore
        // into a new namespace has the session leader inside it.
        setsid();
        execv(path.c_str(), argv.data());
        std::cerr << "phos run: exec " << path << ": " << std::strerror(errno) << "\n";
        _exit(126);
      }
      return SuperviseChild(child, relayed);
    }
    if (errno != EPERM) {
      std::cerr << "phos run: warning: no pid namespace (unshare: " << std::strerror(errno)
                << "); the program runs in ours\n";
    }
  }
  execv(path.c_str(), argv.data());
  std::cerr << "phos run: exec " << path << ": " << std::strerror(errno) << "\n";
  return 126;
}

}  // namespace

void AddRunCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto lib = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto no_pid_ns = std::make_shared<bool>(false);
  auto job = std::make_shared<std::string>();
  CLI::App* cmd = app->add_subcommand(
      "run",
      "Run a CUDA program on phosd: preloads libphos.so so the program's CUDA calls go to the daemon "
      "(which must be running). Built with the shared CUDA runtime (`nvcc -cudart shared`) or nvcc's "
      "default static one, driver-API programs, Python frameworks: all run unmodified. Exits with the "
      "program's status.");
  cmd->add_option("--lib", *lib, "libphos.so to preload (default $PHOS_LIB, else the one installed with phos)");
  cmd->add_option("--name", *name,
                  "A name for the program, unique on this phosd (like `docker run --name`): `phos ps` shows it and "
                  "`phos checkpoint NAME` (every command that takes a pid) finds the program by it. Refused when "
                  "another running program holds it");
  cmd->add_option("--job", *job,
                  "The NCCL job this program is a rank of (give every rank the same JOB): `phos ps` shows it, "
                  "`phos checkpoint JOB --job` checkpoints the whole job. Default: phos names a job after its "
                  "communicator");
  cmd->add_flag("--no-pid-ns", *no_pid_ns,
                "Run the program in our pid namespace. Default (when allowed, i.e. as root): the program is "
                "pid 1 of a new pid namespace, so its whole-process images can be restored while it still "
                "runs and on hosts where its pid is taken (`phos ps` shows its pid as seen from here). "
                "Signals to `phos run` are relayed; one the program does not catch ends it with SIGKILL");
  // prefix_command: CLI11 stops at the first non-option and leaves the rest,
  // in order, in remaining(). After an explicit `--`, the words go to the
  // positional instead and CLI11 leaves that `--` at the end of
  // remaining(): it is ours, not the program's.
  auto positional = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *positional, "the program and its arguments (after `--` if they look like options)");
  cmd->prefix_command();
  cmd->fallthrough(false);  // the program and its arguments are not phos options
  cmd->callback([cmd, lib, name, job, no_pid_ns, positional, global, exit_code] {
    std::vector<std::string> rest = cmd->remaining();
    if (!positional->empty() && !rest.empty() && rest.back() == "--") rest.pop_back();
    std::vector<std::string> args = *positional;
    for (auto& a : rest) args.push_back(a);
    *exit_code = RunProgram(*global, *lib, std::move(args), !*no_pid_ns, *name, *job);
  });
}

}  // namespace phos::cli
