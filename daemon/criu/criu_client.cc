#include "criu/criu_client.h"

#include <criu/criu.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/file_identity.h"
#include "criu/criu_internal.h"
#include "criu/criu_log.h"

namespace phos::criu {
namespace {

// Locks of this file, in the order they may be taken (each later one is a
// leaf taken with or without the earlier ones, never the reverse):
//   g_libcriu_mu  serializes every libcriu call: libcriu reports errno
//                 through one static (`saved_errno`) shared by all
//                 criu_local_* calls. See criu_client.h. Held for a whole
//                 CRIU operation (up to seconds).
//   g_check_mu    guards g_checked (Check()'s cache). Never held while CRIU
//                 runs, so a cached Check() does not wait for a dump.
std::mutex g_libcriu_mu;
std::mutex g_check_mu;
// The file a binary name stands for, as Check()'s cache compares it: a
// replaced, edited or re-pointed binary is a different one (FileIdentity).
struct BinaryIdentity {
  std::string path;
  FileIdentity file;
  bool operator==(const BinaryIdentity&) const = default;
};

// Finds the file libcriu would exec for `name` (its execlp: a name with a
// '/' is a path, a bare name is looked up on PATH, "/bin:/usr/bin" when
// PATH is unset) and stats it. False when there is none: nothing is then
// cached and Check() probes (and fails) every time.
bool IdentifyBinary(const std::string& name, BinaryIdentity* out) {
  std::vector<std::string> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(name);
  } else {
    const char* env = std::getenv("PATH");
    const std::string path = env != nullptr ? env : "/bin:/usr/bin";
    std::size_t from = 0;
    for (;;) {
      const std::size_t colon = path.find(':', from);
      const std::string dir = path.substr(from, colon == std::string::npos ? std::string::npos : colon - from);
      candidates.push_back((dir.empty() ? std::string(".") : dir) + "/" + name);
      if (colon == std::string::npos) break;
      from = colon + 1;
    }
  }
  for (const std::string& c : candidates) {
    struct stat st {};
    if (::stat(c.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(c.c_str(), X_OK) != 0) continue;
    out->path = c;
    out->file = FileIdentity::Of(st);
    return true;
  }
  return false;
}

// Check()'s cache: binary name (BinaryName of the resolved binary) -> the
// identity of the file that passed. Only passes are stored. Guarded by
// g_check_mu.
std::map<std::string, BinaryIdentity> g_checked;

}  // namespace

namespace detail {

void ForgetCheck(const std::string& criu_binary) {
  std::lock_guard<std::mutex> lock(g_check_mu);
  g_checked.erase(criu_binary.empty() ? std::string("criu") : criu_binary);
}

std::string BinaryName(const std::string& criu_binary) {
  return criu_binary.empty() ? std::string("criu") : criu_binary;
}

Status OpenDir(const std::string& what, const std::string& path, bool create, DirFd* out) {
  if (path.empty()) return Status::InvalidArgument(what + ": empty directory path");
  if (create && ::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(what + ": mkdir " + path, errno);
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(what + ": directory " + path + " does not exist");
    return Status::FromErrno(what + ": open " + path, err);
  }
  out->reset(fd);
  return Status::Ok();
}

Status CheckNoImages(const std::string& what, const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return Status::FromErrno(what + ": opendir " + path, errno);
  std::string found;
  while (dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.size() > 4 && name.substr(name.size() - 4) == ".img") {
      found = std::string(name);
      break;
    }
  }
  ::closedir(d);
  if (!found.empty()) {
    return Status::AlreadyExists(what + ": " + path + " already holds CRIU images (" + found +
                                 "); dump into a fresh directory");
  }
  return Status::Ok();
}

std::mutex& OneDumpMutex() {
  static std::mutex dump_mu;
  return dump_mu;
}

Status CheckLogFile(const std::string& what, const std::string& log_file) {
  if (log_file.empty() || log_file.find('/') != std::string::npos) {
    return Status::InvalidArgument(what + ": log_file '" + log_file +
                                   "' must be a plain file name (CRIU writes it into the work "
                                   "directory and refuses paths)");
  }
  return Status::Ok();
}

}  // namespace detail

namespace {
using detail::BinaryName;
using detail::CheckLogFile;
using detail::CheckNoImages;
using detail::DirFd;
using detail::ForgetCheck;
using detail::OpenDir;

struct OptsDeleter {
  void operator()(criu_opts* o) const { criu_local_free_opts(o); }
};
using OptsPtr = std::unique_ptr<criu_opts, OptsDeleter>;

// `criu_binary`: the caller's (phosd's --criu-binary); "" = libcriu's default.
Status NewOpts(const std::string& criu_binary, OptsPtr* out) {
  criu_opts* o = nullptr;  // must be null: init frees a non-null *o
  if (criu_local_init_opts(&o) != 0 || o == nullptr) {
    return Status::OutOfMemory("libcriu: criu_local_init_opts failed");
  }
  out->reset(o);
  if (!criu_binary.empty() && criu_local_set_service_binary(o, criu_binary.c_str()) != 0) {
    return Status::OutOfMemory("libcriu: criu_local_set_service_binary failed");
  }
  return Status::Ok();
}

// Log, work dir and service binary: the parts every request shares.
// `work_fd` must stay open until the call returns.
Status SetLogging(criu_opts* o, const std::string& log_file, int log_level, int work_fd) {
  if (criu_local_set_log_file(o, log_file.c_str()) != 0) {
    return Status::OutOfMemory("libcriu: criu_local_set_log_file failed");
  }
  criu_local_set_log_level(o, log_level);
  if (work_fd >= 0) criu_local_set_work_dir_fd(o, work_fd);
  return Status::Ok();
}

Status AddExternals(criu_opts* o, const std::vector<std::string>& external) {
  for (const std::string& e : external) {
    if (criu_local_add_external(o, e.c_str()) != 0) {
      return Status::InvalidArgument("libcriu: criu_local_add_external('" + e + "') failed");
    }
  }
  return Status::Ok();
}

// Below this much free space, a failed CRIU call says the filesystem is full.
constexpr std::uint64_t kNearlyFullBytes = 1ull << 20;

// CRIU reports a full disk only in its log (cr_errno stays 0), and when the
// log is on the same full filesystem it may stay empty: then nothing would
// say why. So a failure names the filesystem of `dir` when it has (almost)
// no room left.
std::string FullDiskHint(const std::string& dir) {
  struct statvfs v {};
  if (dir.empty() || ::statvfs(dir.c_str(), &v) != 0) return "";
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
  if (free_bytes >= kNearlyFullBytes) return "";
  return fmt::format("; the filesystem holding {} has only {} bytes free (No space left on device is the "
                     "likely cause): free space there or write the images elsewhere",
                     dir, free_bytes);
}

// Turns a failed libcriu return value into a Status naming the operation and
// quoting the log. `pid` > 0 for dumps (checked for existence: a dump of a
// dead pid says so up front); `images_dir` is checked for a full filesystem.
Status CriuFailure(const std::string& what, int ret, int err, const std::string& log_path,
                   const std::string& criu_binary, pid_t pid, const std::string& images_dir) {
  std::string quote = QuoteCriuLog(log_path);
  std::string cr_err = err != 0 ? fmt::format(" (criu errno {}: {})", err, std::strerror(err)) : "";
  switch (-ret) {
    case ECONNREFUSED:
    case ECOMM:
      return Status::Unavailable(fmt::format(
          "{}: could not run '{} swrk' (libcriu {}); is CRIU >= 4.0 installed and on PATH "
          "(scripts/setup.sh), and are we root?{}",
          what, BinaryName(criu_binary), ret, quote));
    case EINVAL:
    case EBADMSG:
      return Status::Unavailable(fmt::format(
          "{}: '{}' does not understand this request (libcriu {}); CRIU >= 4.0 is needed{}",
          what, BinaryName(criu_binary), ret, quote));
    default:
      break;
  }
  if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
    return Status::NotFound(
        fmt::format("{}: pid {} does not exist{}{}", what, pid, cr_err, quote));
  }
  return Status::FailedPrecondition(fmt::format("{}: CRIU failed (libcriu {}){}{}{}", what, ret,
                                                cr_err, FullDiskHint(images_dir), quote));
}

Status DumpImpl(bool pre, pid_t pid, const std::string& images_dir, const DumpOptions& opts) {
  const char* op = pre ? "criu pre-dump" : "criu dump";
  std::string what = fmt::format("{} of pid {} into {}", op, pid, images_dir);
  if (pid <= 0) return Status::InvalidArgument(what + ": invalid pid");
  PHOS_RETURN_IF_ERROR(CheckLogFile(what, opts.log_file));

  DirFd images;
  PHOS_RETURN_IF_ERROR(OpenDir(what, images_dir, /*create=*/true, &images));
  PHOS_RETURN_IF_ERROR(CheckNoImages(what, images_dir));
  DirFd work;
  if (!opts.work_dir.empty()) PHOS_RETURN_IF_ERROR(OpenDir(what, opts.work_dir, true, &work));
  std::string log_path =
      (opts.work_dir.empty() ? images_dir : opts.work_dir) + "/" + opts.log_file;
  if (!opts.parent_dir.empty()) {
    struct stat st {};
    if (::fstatat(images.get(), opts.parent_dir.c_str(), &st, 0) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::NotFound(what + ": parent images '" + opts.parent_dir +
                              "' (relative to the images directory) is not a directory");
    }
  }

  std::lock_guard<std::mutex> lock(g_libcriu_mu);
  const std::string binary = opts.criu_binary;
  OptsPtr o;
  PHOS_RETURN_IF_ERROR(NewOpts(binary, &o));
  criu_local_set_pid(o.get(), pid);
  criu_local_set_images_dir_fd(o.get(), images.get());
  PHOS_RETURN_IF_ERROR(SetLogging(o.get(), opts.log_file, opts.log_level, work.get()));
  // A pre-dump always leaves the tree running; CRIU ignores the flag there.
  criu_local_set_leave_running(o.get(), pre || opts.leave_running);
  criu_local_set_shell_job(o.get(), opts.shell_job);
  criu_local_set_tcp_established(o.get(), opts.tcp_established);
  criu_local_set_file_locks(o.get(), opts.file_locks);
  if (opts.ext_unix_sk) criu_local_set_ext_unix_sk(o.get(), true);
  for (unsigned int ino : opts.external_unix_sk_inodes) {
    if (criu_local_add_unix_sk(o.get(), ino) != 0) {
      return Status::InvalidArgument(fmt::format("{}: cannot add external unix socket {}", what, ino));
    }
  }
  criu_local_set_track_mem(o.get(), pre || opts.track_mem);
  if (!opts.parent_dir.empty() &&
      criu_local_set_parent_images(o.get(), opts.parent_dir.c_str()) != 0) {
    return Status::OutOfMemory("libcriu: criu_local_set_parent_images failed");
  }
  PHOS_RETURN_IF_ERROR(AddExternals(o.get(), opts.external));
  if (opts.timeout_s != 0) criu_local_set_timeout(o.get(), opts.timeout_s);

  // One dump at a time per phosd: two CRIU dumps of processes in their own
  // pid namespaces at once were seen to collide in CRIU's parasite (it
  // mounts a proc of the task's namespace at a fixed path: "Can't create a
  // directory (-17)", "can't get /proc fd"; docs/criu.md "Concurrent
  // dumps"). A dump takes ~0.1 s; checkpoints of other apps wait that long.
  std::unique_lock<std::mutex> one_dump(detail::OneDumpMutex());
  auto t0 = std::chrono::steady_clock::now();
  int ret = pre ? criu_local_pre_dump(o.get()) : criu_local_dump(o.get());
  int err = errno;
  one_dump.unlock();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (ret < 0) {
    spdlog::warn("criu: {} failed ret={} ms={:.1f} log={}", what, ret, ms, log_path);
    ForgetCheck(binary);
    return CriuFailure(what, ret, err, log_path, binary, pid, images_dir);
  }
  spdlog::info("criu: {} ok pid={} dir={} leave_running={} parent={} ms={:.1f}", op, pid,
               images_dir, pre || opts.leave_running, opts.parent_dir, ms);
  return Status::Ok();
}

}  // namespace

Status CriuClient::QueryFeatures(CriuFeatures* out, const std::string& criu_binary) {
  if (out == nullptr) return Status::InvalidArgument("QueryFeatures: out is null");
  *out = CriuFeatures{};
  std::lock_guard<std::mutex> lock(g_libcriu_mu);
  const std::string binary = criu_binary;
  OptsPtr o;
  PHOS_RETURN_IF_ERROR(NewOpts(binary, &o));
  int version = criu_local_get_version(o.get());
  if (version < 0) {
    return Status::Unavailable(fmt::format(
        "could not run '{} swrk' to ask its version (libcriu {}); install CRIU >= 4.0 "
        "(scripts/setup.sh)",
        BinaryName(binary), version));
  }
  out->version = version;
  struct criu_feature_check features {};
  features.mem_track = true;
  features.lazy_pages = true;
  features.pidfd_store = true;
  int ret = criu_local_feature_check(o.get(), &features, sizeof features);
  if (ret != 0) {
    int err = errno;
    return Status::Unavailable(fmt::format(
        "'{}' could not probe the kernel (libcriu feature check {}, errno {}); run `{} check` "
        "as root for the reason",
        BinaryName(binary), ret, err, BinaryName(binary)));
  }
  out->mem_track = features.mem_track;
  out->lazy_pages = features.lazy_pages;
  out->pidfd_store = features.pidfd_store;
  return Status::Ok();
}

Status CriuClient::Check(const std::string& criu_binary) {
  if (::geteuid() != 0) {
    return Status::Unavailable(fmt::format(
        "CRIU needs root here (phos runs it privileged); euid is {}", ::geteuid()));
  }
  const std::string name = BinaryName(criu_binary);
  BinaryIdentity id;
  const bool identified = IdentifyBinary(name, &id);
  if (identified) {
    std::lock_guard<std::mutex> lock(g_check_mu);
    auto it = g_checked.find(name);
    if (it != g_checked.end() && it->second == id) return Status::Ok();
  }
  // Probed without g_check_mu (it takes g_libcriu_mu and runs criu twice);
  // two Checks missing at once both probe, and agree.
  const auto t0 = std::chrono::steady_clock::now();
  CriuFeatures f;
  Status s = QueryFeatures(&f, name);
  if (s.ok() && f.version < kMinCriuVersion) {
    s = Status::Unavailable(fmt::format(
        "CRIU {}.{}.{} is too old; phos needs >= 4.0 (scripts/setup.sh installs it)",
        f.version / 10000, f.version / 100 % 100, f.version % 100));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(g_check_mu);
  if (s.ok() && identified) {
    // Remembered only when it passed: a failure is re-probed next time.
    g_checked[name] = id;
    spdlog::info("criu: {} ({}) checked: version {} mem_track={} ({:.1f} ms); remembered until that file changes "
                 "or a CRIU call with it fails",
                 name, id.path, f.version, f.mem_track, ms);
  } else {
    g_checked.erase(name);
    if (!s.ok()) spdlog::info("criu: check of {} failed ({:.1f} ms): {}", name, ms, s.ToString());
  }
  return s;
}

void CriuClient::ForgetChecks() {
  std::lock_guard<std::mutex> lock(g_check_mu);
  g_checked.clear();
}

Status CriuClient::PreDump(pid_t pid, const std::string& images_dir, const DumpOptions& opts) {
  return DumpImpl(/*pre=*/true, pid, images_dir, opts);
}

Status CriuClient::Dump(pid_t pid, const std::string& images_dir, const DumpOptions& opts) {
  return DumpImpl(/*pre=*/false, pid, images_dir, opts);
}

Status CriuClient::Restore(const std::string& images_dir, const RestoreOptions& opts,
                           pid_t* restored_pid) {
  std::string what = "criu restore from " + images_dir;
  if (restored_pid == nullptr) return Status::InvalidArgument(what + ": restored_pid is null");
  *restored_pid = -1;
  PHOS_RETURN_IF_ERROR(CheckLogFile(what, opts.log_file));
  DirFd images;
  PHOS_RETURN_IF_ERROR(OpenDir(what, images_dir, /*create=*/false, &images));
  // Every CRIU dump starts with inventory.img; without it CRIU's own error
  // is less direct than this one.
  if (::faccessat(images.get(), "inventory.img", F_OK, 0) != 0) {
    return Status::Corruption(what + ": not a CRIU image directory (no inventory.img)");
  }
  if (opts.lazy_pages) return detail::RestoreLazy(images_dir, opts, restored_pid);
  DirFd work;
  if (!opts.work_dir.empty()) PHOS_RETURN_IF_ERROR(OpenDir(what, opts.work_dir, true, &work));
  std::string log_path =
      (opts.work_dir.empty() ? images_dir : opts.work_dir) + "/" + opts.log_file;

  std::lock_guard<std::mutex> lock(g_libcriu_mu);
  const std::string binary = opts.criu_binary;
  OptsPtr o;
  PHOS_RETURN_IF_ERROR(NewOpts(binary, &o));
  criu_local_set_images_dir_fd(o.get(), images.get());
  PHOS_RETURN_IF_ERROR(SetLogging(o.get(), opts.log_file, opts.log_level, work.get()));
  criu_local_set_shell_job(o.get(), opts.shell_job);
  criu_local_set_tcp_established(o.get(), opts.tcp_established);
  criu_local_set_file_locks(o.get(), opts.file_locks);
  if (opts.ext_unix_sk) criu_local_set_ext_unix_sk(o.get(), true);
  PHOS_RETURN_IF_ERROR(AddExternals(o.get(), opts.external));
  for (const auto& [fd, key] : opts.inherit_fds) {
    if (criu_local_add_inherit_fd(o.get(), fd, key.c_str()) != 0) {
      return Status::InvalidArgument(fmt::format("{}: cannot add inherit fd {} '{}'", what, fd, key));
    }
  }

  auto t0 = std::chrono::steady_clock::now();
  int ret = opts.detach ? criu_local_restore(o.get()) : criu_local_restore_child(o.get());
  int err = errno;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (ret <= 0) {
    spdlog::warn("criu: {} failed ret={} ms={:.1f} log={}", what, ret, ms, log_path);
    ForgetCheck(binary);
    return CriuFailure(what, ret == 0 ? -EBADE : ret, err, log_path, binary, 0, images_dir);
  }
  *restored_pid = ret;
  spdlog::info("criu: restore ok dir={} pid={} detach={} ms={:.1f}", images_dir, ret, opts.detach,
               ms);
  return Status::Ok();
}

}  // namespace phos::criu
