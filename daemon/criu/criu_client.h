// phos::criu::CriuClient — checkpoint/restore of the (GPU-free) app process
// through libcriu (docs/criu.md).
//
// libcriu talks to a `criu swrk` process it forks for every call (RPC over a
// SOCK_SEQPACKET socketpair). Lazy migration's three steps run the criu
// command line instead (criu_command.h: libcriu 4.1.1 cannot ask for lazy
// pages); we never parse CRIU's output.
// Every call builds its own criu_opts object (criu_local_* API), so no
// libcriu global option state is used.
//
// Thread safety: all functions may be called from any thread. libcriu keeps
// one process-wide static (`saved_errno`, the errno it reports) even on the
// criu_local_* path, so calls are serialized by a process-wide mutex inside
// criu_client.cc (owner: that file). CRIU operations take tens of ms to
// seconds, so the serialization costs nothing measurable today; a daemon
// that wants parallel dumps of different apps can lift it once errno is not
// needed from libcriu. Check()'s cache and the default binary have mutexes
// of their own, so a cached Check() never waits for a dump in progress.
//
// Children: each call forks `criu swrk` and waits for it (waitpid on that
// pid). A caller must therefore not reap children with waitpid(-1) or set
// SIGCHLD to SIG_IGN while a call runs (the swrk child would be reaped or
// lost under it; the call still returns, but see docs/criu.md).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "criu/criu_command.h"

namespace phos::criu {

/// Minimum CRIU binary version (major*10000 + minor*100 + sub): 4.0. Debian
/// 12's 3.17 fails `criu check` on current kernels (scripts/setup.sh).
inline constexpr int kMinCriuVersion = 40000;

struct DumpOptions {
  /// Checkpoints keep the app running; false kills the tree after a
  /// successful dump (a migration / "stop" checkpoint).
  bool leave_running = true;
  /// The process shares a session/controlling terminal with a process
  /// outside the dumped tree (e.g. started from an interactive shell without
  /// setsid). A process that is its own session leader (setsid) without a
  /// tty does not need it. Must be passed to Restore too.
  bool shell_job = false;
  bool tcp_established = false;
  bool file_locks = false;
  /// Allow unix sockets whose peer is outside the dumped tree (CRIU:
  /// --ext-unix-sk). For datagram sockets only unless inodes are listed in
  /// `external_unix_sk_inodes`; see docs/criu.md for what CRIU does with a
  /// connected stream/seqpacket socket.
  bool ext_unix_sk = false;
  std::vector<unsigned int> external_unix_sk_inodes;
  /// Soft-dirty memory tracking, needed by PreDump and by a Dump that names
  /// a `parent_dir` (PreDump forces it on).
  bool track_mem = false;
  /// Images of the previous pre-dump, relative to the images directory as
  /// CRIU wants it ("../pre1"); empty = a full dump.
  std::string parent_dir;
  /// --external items ("mnt[...]:...", "unix[ino]", ...), passed verbatim.
  std::vector<std::string> external;
  /// CRIU's own freeze/collect timeout in seconds; 0 = CRIU's default (10).
  unsigned int timeout_s = 0;
  /// Log file name (CRIU refuses names with '/'), written into `work_dir`.
  std::string log_file = "criu-dump.log";
  /// Directory for the log; empty = the images directory.
  std::string work_dir;
  int log_level = 4;  // 0..4, 4 = debug; the log is what errors quote.
  /// criu binary started for the RPC (phosd: --criu-binary); empty = `criu` on PATH.
  std::string criu_binary;
};

struct RestoreOptions {
  /// true: criu_local_restore — the restored root is NOT the caller's child:
  ///   CRIU's swrk process forks it and exits, so it is re-parented to the
  ///   nearest PR_SET_CHILD_SUBREAPER ancestor of the caller, or to init. The
  ///   caller cannot waitpid() it unless it is a subreaper itself.
  /// false: criu_local_restore_child — the restored root is created as the
  ///   caller's child (CLONE_PARENT from swrk); the caller must waitpid() it.
  bool detach = true;
  bool shell_job = false;
  bool tcp_established = false;
  bool file_locks = false;
  bool ext_unix_sk = false;
  /// --external items, verbatim (see DumpOptions::external).
  std::vector<std::string> external;
  /// --inherit-fd: {fd in the caller, key}; CRIU hands the fd to the
  /// restored tree in place of the external resource named `key`
  /// (e.g. "pipe:[12345]"). The fd must stay open until Restore returns.
  std::vector<std::pair<int, std::string>> inherit_fds;
  /// The image was dumped by StartLazyDump: its private memory is not in
  /// it but comes from the `criu lazy-pages` daemon StartLazyPages runs in
  /// the same images directory (userfaultfd), which must be ready before
  /// Restore. Runs `criu restore --lazy-pages -d` from the command line
  /// (libcriu cannot ask for it); needs `detach` and the default work_dir.
  bool lazy_pages = false;
  /// Log file name, written into `work_dir`; empty work_dir = the images
  /// directory (a restore then adds its log to the checkpoint directory).
  std::string log_file = "criu-restore.log";
  std::string work_dir;
  int log_level = 4;
  /// criu binary started for the RPC (phosd: --criu-binary); empty = `criu` on PATH.
  std::string criu_binary;
};

/// Kernel/CRIU features that differ between machines (criu check --feature).
struct CriuFeatures {
  int version = 0;         // major*10000 + minor*100 + sub
  bool mem_track = false;  // soft-dirty tracking: PreDump / incremental dumps
  bool lazy_pages = false; // userfaultfd lazy restore
  bool pidfd_store = false;
};

class CriuClient {
 public:
  /// OK when CRIU can be used here: running as root, the criu binary starts,
  /// reports a version >= kMinCriuVersion, and its kernel probe (the RPC
  /// feature check) succeeds. Otherwise Unavailable with the reason.
  ///
  /// It does not run the RPC `check` request: libcriu's criu_local_check
  /// sends no options and CRIU 4.1.1's swrk crashes on that (a NULL options
  /// dereference in the forked check child, seen here as a SIGSEGV and
  /// -EBADE; upstream criu PR #2789 reworks it). `criu check` from a shell
  /// remains the full diagnosis.
  ///
  /// `criu_binary`: the one Dump/Restore run (phosd: --criu-binary); empty =
  /// `criu` on PATH.
  ///
  /// Cached: the probe forks `criu swrk` twice (~10 ms + ~100 ms, the kernel
  /// probe forks iptables and more), and phosd checks before every
  /// whole-process checkpoint, restore, migration and template start. A
  /// PASSED check is remembered per binary together with the identity of
  /// the file it runs (path as execlp finds it, device, inode, size, mtime,
  /// ctime), so replacing or editing the binary makes the next Check probe
  /// again. A FAILED check is never remembered (the next one probes: the
  /// operator may be fixing the setup), and any failed Dump/PreDump/Restore
  /// with a binary drops that binary's remembered pass, so after CRIU broke
  /// the next Check probes and refuses up front. What the cache cannot see:
  /// a binary that starts failing without its file changing (a wrapper
  /// script whose behaviour depends on other files, a kernel setting
  /// changed at run time); the first CRIU call then fails on its own, with
  /// the same kind of error, and the Check after it probes again.
  /// Only the euid test runs on every call.
  static Status Check(const std::string& criu_binary = "");

  /// Forgets every remembered passed Check() (the next one probes again).
  /// For tests, and for callers that changed something the cache cannot
  /// see.
  static void ForgetChecks();

  /// Version and optional features of the criu binary on this kernel.
  static Status QueryFeatures(CriuFeatures* out, const std::string& criu_binary = "");

  /// Pre-dump (memory only, the task keeps running; track_mem is forced on)
  /// into `images_dir`, which is created if missing and must not already
  /// hold images. A later Dump names it as its parent_dir.
  static Status PreDump(pid_t pid, const std::string& images_dir, const DumpOptions& opts);

  /// Dumps the tree rooted at `pid` into `images_dir` (created if missing,
  /// must not already hold images).
  static Status Dump(pid_t pid, const std::string& images_dir, const DumpOptions& opts);

  /// Restores the tree dumped in `images_dir`; *restored_pid is the restored
  /// root's pid (the same pid it had when dumped). See RestoreOptions::detach
  /// for who must reap it.
  static Status Restore(const std::string& images_dir, const RestoreOptions& opts,
                        pid_t* restored_pid);

  // ---- Lazy migration (docs/criu.md "Lazy pages"): the process runs at
  // the destination while its private memory still arrives, so CRIU's
  // pages are not in a migration's downtime. Three commands, two hosts:
  //   source:      StartLazyDump  -> `criu dump --lazy-pages` serving pages over page_fd
  //   destination: StartLazyPages -> `criu lazy-pages` asking for them over its page_fd
  //                Restore(lazy_pages) -> the process, its memory faulted in from the daemon
  // page_fd is one connection (phos's authenticated data channel) between
  // the two; CRIU speaks its page-server protocol over it.

  /// Starts `criu dump --lazy-pages --ps-socket page_fd` of `pid` into
  /// `images_dir` (created if missing, must not hold images; options as
  /// Dump's) and returns once the images —
  /// everything but the private memory — are written and it serves that
  /// memory over `page_fd` (`*dump` then keeps running). The task stays
  /// frozen by CRIU until the dump ends, then returns to the state
  /// `leave_running` says (a stopped task stays stopped).
  ///
  /// The dump ends when the other end closes `page_fd`: `(*dump)->Wait()`.
  /// Its exit status does NOT say whether every page arrived (CRIU 4.1.1
  /// exits 0 when the lazy-pages daemon quits early): only the
  /// destination's StartLazyPages command can. `page_fd` stays the
  /// caller's (the command has its own copy).
  ///
  /// CRIU keeps writing its log while it serves: a caller that sends
  /// `images_dir` on before the dump ends (a migration) must put the log
  /// elsewhere (`opts.work_dir`), or the files it sends change under it.
  static Status StartLazyDump(pid_t pid, const std::string& images_dir, const DumpOptions& opts, int page_fd,
                              std::unique_ptr<CriuCommand>* dump);

  /// Starts `criu lazy-pages` for the images in `images_dir`, asking for
  /// pages over `page_fd`, and returns once it waits for the restore. Its
  /// `Wait()` is Ok once it delivered every page of the restored process
  /// (it exits after the last); an error when the page server went away
  /// first, or the process died.
  static Status StartLazyPages(const std::string& images_dir, int page_fd, const std::string& criu_binary,
                               std::unique_ptr<CriuCommand>* daemon);
};

}  // namespace phos::criu
