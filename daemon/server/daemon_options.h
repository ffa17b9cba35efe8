// Everything `phos daemon` / phosd can be told on its command line.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend_factory.h"
#include "common/socket_path.h"

namespace phos::server {


/// $XDG_CACHE_HOME/phos/signatures, else $HOME/.cache/phos/signatures,
/// else "" (no cache).
std::string DefaultSignatureCacheDir();

/// DaemonOptions::cow_reserve_bytes when --cow-reserve is not given.
inline constexpr std::uint64_t kCowReserveAuto = ~0ull;
/// What --cow-reserve resolves to on backend `backend_name` ("cuda", "sim").
std::uint64_t CowReserveFor(std::uint64_t asked, const std::string& backend_name);

struct DaemonOptions {
  std::string socket_path = DefaultSocketPath();
  std::string log_level = "info";
  backend::BackendOptions backend;
  /// Contexts pre-created per GPU by the context pool (docs/backends.md "Context pool"); 0
  /// disables it (every session creates its context on demand).
  int pool_size = 2;
  /// On SIGTERM: how long shutdown may wait for sessions stuck in the GPU
  /// driver before phosd exits anyway (RunDaemonUntilSignal); 0 = forever.
  int stop_timeout_s = 10;
  /// A call a session has executed this long is logged once (0 = never).
  int slow_call_log_s = 10;
  /// Device memory per GPU reserved for soft copy-on-write shadows,
  /// allocated (and written once) when phosd starts (engine/shadow_pool.h).
  /// kCowReserveAuto: CowReserveFor(the backend) — 2 GiB on cuda, 256 MiB
  /// on the sim, whose device memory is this host's RAM.
  std::uint64_t cow_reserve_bytes = kCowReserveAuto;
  /// Kernels without PTX while an operation validates: "trust" admits them
  /// with their speculated access set, "stop" handles them stop-the-world.
  std::string unvalidated = "trust";
  /// Soft recopy: rounds before the final quiesce at most.
  int recopy_rounds = 5;
  /// Where checkpoints go when a request names no directory; "" = derived
  /// ($PHOS_STATE_DIR/checkpoints, else <socket dir>/checkpoints). Leftover
  /// `*.tmp` images in it are removed at startup (image/recovery.h).
  std::string checkpoint_root;
  /// On-disk cache of kernel signatures (libclang parses, keyed by the
  /// module's hash); "" disables it. Default: $XDG_CACHE_HOME/phos/signatures,
  /// else ~/.cache/phos/signatures (see DefaultSignatureCacheDir).
  std::string signature_cache_dir = DefaultSignatureCacheDir();
  /// Peer plane (docs/migration.md): HOST:PORT of the TCP PhosPeer server;
  /// "" = nothing listens on TCP. Needs peer_token_file.
  std::string listen;
  /// File whose first line is the token peers share (mode 0600 or stricter).
  std::string peer_token_file;
  /// etcd endpoints (HOST:PORT[,...]) for jobs across phosds
  /// (daemon/cluster/); "" = none. Needs listen.
  std::string etcd;
  /// What other phosds dial to reach this one's peer plane; "" = listen's
  /// host with the port it bound.
  std::string advertise;
  /// The etcd lease's time to live in seconds.
  int etcd_lease_ttl_s = 5;
  /// Largest image a peer may send (ReceiveImage).
  std::uint64_t max_receive_bytes = 1ull << 40;
  /// The criu binary whole-process checkpoints and restores run (a path, or
  /// a name looked up on PATH); "" = libcriu's default, `criu` on PATH.
  /// Daemon::Start puts it in PhosServiceConfig, which passes it to every
  /// CRIU call (Check, dump, restore, migration, templates).
  std::string criu_binary;
  /// In-memory copies of serverless templates (docs/templates.md): "auto"
  /// = a private tmpfs directory under /dev/shm, "off" = none (starts read
  /// <checkpoint root>/templates), else a tmpfs directory.
  std::string template_cache = "auto";
  /// Tests only (hidden --test-drop-restore-reply): the peer plane's every
  /// RestoreImage restores and resumes as asked, records the outcome, then
  /// answers UNAVAILABLE — the reply lost after the copy already runs, which
  /// the source recovers with RestoreStatus (docs/migration.md).
  bool test_drop_restore_reply = false;
  /// Tests only (hidden --test-pause-cut-before-capture FILE): this
  /// phosd's part in a job cut another phosd coordinates, once told to
  /// capture, waits until FILE exists — a point where a test can kill this
  /// phosd or etcd mid-checkpoint, every rank held at the cut.
  std::string test_pause_cut_before_capture;
};

/// Where checkpoints that name no directory go: options.checkpoint_root
/// when given, else $PHOS_STATE_DIR/checkpoints, else <socket dir>/
/// checkpoints. Read once, when phosd starts.
std::string ResolveCheckpointRoot(const DaemonOptions& options);

}  // namespace phos::server
