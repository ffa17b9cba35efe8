#include "server/daemon_flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace phos::server {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// An explicitly named CRIU binary must be runnable, so a typo is refused at
// startup instead of failing the first whole-process checkpoint. A bare
// name is looked up on PATH, as libcriu's execlp() will do.
Status CheckCriuBinary(const std::string& binary) {
  if (binary.find('/') != std::string::npos) {
    if (IsExecutableFile(binary)) return Status::Ok();
    return Status::InvalidArgument("--criu-binary " + binary + ": not an executable file");
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    if (IsExecutableFile(dir + "/" + binary)) return Status::Ok();
    start = end + 1;
  }
  return Status::InvalidArgument("--criu-binary " + binary + ": no executable of that name on PATH (" + dirs +
                                 "); give a path");
}

}  // namespace

void AddDaemonFlags(CLI::App* app, DaemonOptions* options, DaemonFlagValues* raw) {
  app->add_option("--socket", options->socket_path,
                  "Control socket (default $PHOS_SOCKET or /run/phos/phosd.sock)")
      ->capture_default_str();
  app->add_option("--backend", raw->backend,
                  "GPU backend: cuda (real GPU via the driver), sim (functional GPU in memory), "
                  "auto (cuda when a driver and GPU are present, else sim)")
      ->check(CLI::IsMember({"auto", "cuda", "sim"}))
      ->capture_default_str();
  app->add_option("--log-level", options->log_level,
                  "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app->add_option("--pool", options->pool_size,
                  "Contexts to keep ready per GPU (with their cuBLAS handle on cuda), refilled in "
                  "the background; sessions and restores take one at once. 0 = create on demand")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app->add_option("--cow-reserve", options->cow_reserve_bytes,
                  "Device memory per GPU reserved, when phosd starts, for copy-on-write checkpoints' "
                  "shadow copies of buffers the app writes before they are saved, e.g. 2G, 512M; a "
                  "writer waits when it is used up. 0 = no reserve (writers wait for the copier)")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("2G on cuda, 256M on sim");
  app->add_option("--unvalidated", options->unvalidated,
                  "Kernels with no PTX (their access set cannot be checked by a twin) while a checkpoint "
                  "or restore is in flight: trust = run them with the speculated set, stop = handle "
                  "them stop-the-world")
      ->check(CLI::IsMember({"trust", "stop"}))
      ->capture_default_str();
  app->add_option("--recopy-rounds", options->recopy_rounds,
                  "Soft recopy: copy rounds while the app runs (at most) before the final quiesce")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app->add_option("--checkpoint-root", options->checkpoint_root,
                  "Directory for checkpoints that name no --out (default $PHOS_STATE_DIR/checkpoints, "
                  "else next to the socket); incomplete images (*.tmp) in it are removed at startup");
  app->add_option("--signature-cache-dir", options->signature_cache_dir,
                  "On-disk cache of kernel signatures parsed with libclang (saves 5-10 ms per new "
                  "module image); empty = no cache")
      ->capture_default_str();
  app->add_option("--listen", options->listen,
                  "Serve the peer plane (migration transport, docs/migration.md) on TCP HOST:PORT "
                  "(port 0 = any free one, logged); needs --peer-token. Default: no TCP listener");
  app->add_option("--peer-token", options->peer_token_file,
                  "File whose first line is the token daemons share for the peer plane; must be "
                  "mode 0600 or stricter");
  app->add_option("--etcd", options->etcd,
                  "etcd endpoints HOST:PORT[,...] through which phosds coordinate NCCL jobs whose ranks run "
                  "on several of them (docs/protocols.md \"Jobs across phosds\"); needs --listen and "
                  "--peer-token (the same token on every phosd). Default: none (a job lives on one phosd)");
  app->add_option("--advertise", options->advertise,
                  "With --etcd: the HOST:PORT other phosds reach this one's peer plane at. Default: the "
                  "--listen address (with the port it bound)");
  app->add_option("--etcd-lease-ttl", options->etcd_lease_ttl_s,
                  "With --etcd: seconds after which other phosds consider this one gone when it stops "
                  "renewing its etcd lease (it renews every third of that)")
      ->check(CLI::Range(2, 300))
      ->capture_default_str();
  app->add_option("--max-receive-bytes", options->max_receive_bytes,
                  "Largest image a peer may send, e.g. 512G")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("1T");
  app->add_option("--criu-binary", options->criu_binary,
                  "CRIU binary for whole-process checkpoints and restores (a path, or a name looked "
                  "up on PATH; it must be CRIU >= 4.0). Default: criu on PATH");
  app->add_option("--template-cache", options->template_cache,
                  "Where phosd keeps in-memory copies of serverless templates, so a start reads no disk: "
                  "auto (a private directory under /dev/shm), off, or a tmpfs directory; a directory "
                  "that is not tmpfs is not used (logged)")
      ->capture_default_str();
  app->add_option("--cuda-module-loading", options->backend.cuda.module_loading,
                  "cuda: when the driver loads an app's kernels: eager (with the module; an app whose kernel "
                  "spins waiting for another cannot deadlock on a lazy load) or lazy (on first launch: "
                  "less device memory for modules with many unused kernels). CUDA_MODULE_LOADING in "
                  "phosd's environment wins")
      ->check(CLI::IsMember({"eager", "lazy"}))
      ->capture_default_str();
  app->add_option("--nccl-library", options->backend.cuda.nccl_library,
                  "cuda: the NCCL phosd runs the apps' collectives with (a path or a soname; every rank of a "
                  "communicator must use the same NCCL, so one phosd serves them all with its own). \"none\" "
                  "refuses ncclCommInitRank, naming why. Default: libnccl.so.2")
      ->default_str("libnccl.so.2");
  app->add_option("--stop-timeout", options->stop_timeout_s,
                  "Seconds phosd waits on SIGTERM for its sessions to release their GPU state; past it, phosd "
                  "logs what each stuck session is executing and exits anyway (the driver frees what the "
                  "process held). 0 = wait forever")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app->add_option("--slow-call-log", options->slow_call_log_s,
                  "Seconds after which a call still executing for an app is logged (a warning naming the "
                  "session, pid and API: a kernel that never ends shows while it happens). 0 = never")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  app->add_option("--sim-link-gbps", options->backend.sim.link_gbps,
                  "sim: modelled host<->device link bandwidth per copy engine in GB/s "
                  "(0 = unthrottled)")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  app->add_flag("--sim-interp-thread-at-a-time", options->backend.sim.interp_thread_at_a_time,
               "sim: run each GPU thread alone rather than a warp's lanes together (the interpreter's "
               "earlier scheduler, about ten times slower; same results): a baseline for benchmarks");
  app->add_option("--sim-copy-engines", options->backend.sim.copy_engines,
                  "sim: number of copy engines (concurrent host<->device copies)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app->add_option("--sim-stream-depth", options->backend.sim.stream_depth,
                  "sim: ops a stream queues before the app's next launch waits (like a GPU's bounded launch "
                  "queue; a checkpoint's quiesce waits for what is queued); 0 = unbounded")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app->add_option("--sim-memory", options->backend.sim.memory_bytes,
                  "sim: modelled device memory per GPU, e.g. 80G")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("80G");
  app->add_option("--sim-gpus,--sim-devices", options->backend.sim.device_count,
                  "sim: number of GPUs phosd models (each with its own memory and copy engines)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app->add_option("--sim-va-base", raw->sim_va_base,
                  "sim: base of the device address range (hex); must match between daemons "
                  "that restore each other's images")
      ->default_str("0x7c0000000000");
  // Fault injection for migrate_test; the empty group keeps it out of --help.
  app->add_flag("--test-drop-restore-reply", options->test_drop_restore_reply,
                "Tests only: every peer RestoreImage restores, then answers UNAVAILABLE (a lost reply)")
      ->group("");
  // Fault injection for job_across_phosds_test (a phosd or etcd that dies mid-checkpoint).
  app->add_option("--test-pause-cut-before-capture", options->test_pause_cut_before_capture,
                  "Tests only: a job cut this phosd joins waits, before capturing, until FILE exists")
      ->group("");
}

Status FinishDaemonFlags(const DaemonFlagValues& raw, DaemonOptions* options) {
  if (!options->listen.empty() && options->peer_token_file.empty()) {
    return Status::InvalidArgument("--listen " + options->listen +
                                   " needs --peer-token FILE (peers authenticate with a shared token)");
  }
  if (!options->etcd.empty() && options->listen.empty()) {
    return Status::InvalidArgument("--etcd " + options->etcd +
                                   " needs --listen HOST:PORT and --peer-token FILE: phosds of one job exchange "
                                   "their ranks' data over the peer plane");
  }
  if (!options->advertise.empty() && options->etcd.empty()) {
    return Status::InvalidArgument("--advertise only means something with --etcd");
  }
  PHOS_RETURN_IF_ERROR(backend::ParseBackendKind(raw.backend, &options->backend.kind));
  if (!options->criu_binary.empty()) PHOS_RETURN_IF_ERROR(CheckCriuBinary(options->criu_binary));
  if (!raw.sim_va_base.empty()) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(raw.sim_va_base.c_str(), &end, 16);
    if (end == raw.sim_va_base.c_str() || *end != '\0' || v == 0 || (v & 0xfff) != 0) {
      return Status::InvalidArgument("--sim-va-base '" + raw.sim_va_base +
                                     "' must be a non-zero, page-aligned hex address");
    }
    options->backend.sim.va_base = v;
  }
  return Status::Ok();
}

}  // namespace phos::server
