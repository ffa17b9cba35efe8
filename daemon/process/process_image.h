// What a whole-process checkpoint adds to a GPU image directory besides
// CRIU's images (DIR/criu/): the facts phosd needs to re-attach the
// restored app (docs/criu.md "Whole-process checkpoint and restore"), as
// the manifest's ProcessRecord (proto/image.proto), added to the GPU
// image's manifest before the directory is committed: one format, one
// version, one checksum for everything the image says.
//
// Also the /proc and sock_diag look-ups both sides need. Plain functions; no
// shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "ring/ring_layout.h"

namespace phos::image::v1 {
class Manifest;
}  // namespace phos::image::v1

namespace phos::process {

inline constexpr const char* kCriuSubdir = "criu";

/// CRIU options a user asks for (`--shell-job`, `--tcp-established`,
/// `--file-locks`; CriuOptions in proto/phos.proto). A dump records what it
/// used in the image, so its restore uses the same.
struct CriuUserOptions {
  bool shell_job = false;        // force it (phosd turns it on itself for an app that is not its session leader)
  bool tcp_established = false;  // dump/restore established TCP connections
  bool file_locks = false;       // dump/restore held file locks
};

struct ProcessImage {
  pid_t pid = 0;                 // the app's pid (CRIU restores it with the same one)
  uid_t uid = 0;
  uint64_t session_id = 0;       // the session that was checkpointed (informational)
  uint64_t channel_inode = 0;    // inode of the APP's end of its channel socket
  uint64_t ring_start = 0;       // the app's mapping of the ring memfd [start, end)
  uint64_t ring_end = 0;
  ring::RingGeometry geometry;   // phosd's copy; the restored region must match it
  uint64_t ring_head = 0;        // consumer position at the dump (informational)
  uint64_t admitted = 0;         // calls admitted when both states were fixed
  bool shell_job = false;        // the app is not its own session leader
  // The app is pid 1 of its own pid namespace (`phos run`'s default):
  // CRIU restores it into a NEW namespace, so the restored copy has another
  // host pid and the original may still run (docs/criu.md "Pid namespaces").
  bool pid_namespace = false;
  bool tcp_established = false;  // dumped with --tcp-established: restore needs it too
  bool file_locks = false;       // dumped with --file-locks: restore needs it too
  std::string cmdline;           // NUL-separated argv (the channel hello)
  // The app's pinned host segments (cudaMallocHost / cudaHostAlloc arena):
  // MAP_SHARED memfd mappings, so CRIU saves their pages like the ring's;
  // the restore reopens each through /proc/PID/map_files and registers it
  // with the new session under the same id and app address.
  struct HostSegment {
    uint64_t id = 0;
    uint64_t app_base = 0;
    uint64_t bytes = 0;
  };
  std::vector<HostSegment> host_segments;
};

/// Adds `image` as the ProcessRecord of the manifest in DIR (a staged GPU
/// image: the manifest is rewritten, tmp + rename, before DIR is committed).
/// `durable` false: no fsync (a migration's staging, sent on at once).
Status WriteProcessImage(const std::string& dir, const ProcessImage& image, bool durable = true);
/// The ProcessRecord of DIR's manifest. NotFound when the manifest has none
/// (a GPU-only image); the manifest's own checks (format version, checksum)
/// apply.
Status ReadProcessImage(const std::string& dir, ProcessImage* image);
/// The same from a manifest already read (`dir` names it in errors), for a
/// caller that needs more of the manifest than the process record.
Status ProcessImageFromManifest(const image::v1::Manifest& manifest, const std::string& dir, ProcessImage* image);

/// The inode of the peer of the connected unix socket `fd` (sock_diag
/// UNIX_DIAG_PEER; needs CONFIG_UNIX_DIAG, which CRIU needs too).
Status UnixPeerInode(int fd, uint64_t* inode);
/// The app's mapping of the memfd whose inode is `inode` (from
/// /proc/PID/maps; offset 0, exactly `bytes` long).
Status FindMemfdMapping(pid_t pid, uint64_t inode, uint64_t bytes, uint64_t* start, uint64_t* end);
/// /proc/PID/map_files/START-END: the file behind `pid`'s mapping of
/// [start, end), which phosd opens to reach a memfd the app maps (the
/// ring, pinned host segments), also after CRIU recreated it.
std::string MapFilesPath(pid_t pid, uint64_t start, uint64_t end);
/// How `pid` sits in pid namespaces, from /proc/PID/status NSpid: `*own_ns`
/// = it is pid 1 of a namespace below ours. NotSupported when it is a
/// member of such a namespace but not its init (CRIU dumps a namespace
/// from its init only).
Status PidNamespaceRole(pid_t pid, bool* own_ns);
/// True if /proc/PID/fd holds socket:[inode].
bool ProcessHoldsSocket(pid_t pid, uint64_t inode);

}  // namespace phos::process
