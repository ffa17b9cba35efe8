// SignatureCache: kernel signatures per fatbin, in memory and on disk.
//
// Apps register hundreds of kernels per fatbin and a libclang parse costs
// milliseconds, so signatures are resolved once per fatbin (one libclang
// parse for a whole batch, ResolveAll) and kept:
//   - in memory: fatbin hash -> mangled name -> (request, signature);
//   - on disk (when a directory is given): one file per fatbin,
//     <dir>/<xxh3-64 of the fatbin bytes, 16 hex digits>.sig, a versioned
//     text format ending in an xxh3 checksum line, written atomically
//     (temporary file, fsync, rename). A file that does not parse, has the
//     wrong version or fatbin hash, or fails its checksum is ignored with a
//     warning and rewritten on the next flush; it is never trusted.
// An entry is reused only for the same request (same .nv.info table); a
// different table for the same name re-resolves and replaces it.
//
// Thread safety: all methods may be called concurrently. mu_ guards the
// maps and the statistics; write_mu_ serialises file writes (taken before
// mu_, never after) so the newest snapshot of a fatbin is the one renamed
// last. libclang runs outside mu_ (under its own process-wide mutex, see
// signature_parser.cc), so lookups are not blocked by a parse.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "signature/kernel_signature.h"

namespace phos::signature {

class SignatureCache {
 public:
  struct Stats {
    uint64_t memory_hits = 0;     // served from memory (incl. entries loaded from disk)
    uint64_t disk_hits = 0;       // of which: entries that came from a cache file
    uint64_t resolved = 0;        // kernels resolved with libclang (misses)
    uint64_t files_loaded = 0;    // cache files read successfully
    uint64_t corrupt_files = 0;   // cache files ignored
    uint64_t files_written = 0;
  };

  /// `dir` empty: memory only. The directory is created on first write.
  explicit SignatureCache(std::string dir = "");
  /// Flushes (errors are logged).
  ~SignatureCache();
  SignatureCache(const SignatureCache&) = delete;
  SignatureCache& operator=(const SignatureCache&) = delete;

  /// xxh3_64 of the fatbin bytes: the cache key.
  static uint64_t HashFatbin(std::span<const uint8_t> fatbin);
  /// <dir>/<16 hex digits>.sig
  static std::string CacheFilePath(const std::string& dir, uint64_t fatbin_hash);

  /// One kernel; a miss resolves it (libclang) and marks the fatbin dirty
  /// (written by Flush or the destructor).
  Status Resolve(uint64_t fatbin_hash, const KernelRequest& request, KernelSignature* out);

  /// Every kernel of a fatbin, misses resolved with one libclang parse; the
  /// fatbin's file is written before returning when anything was new.
  /// out and statuses get one entry per request; the return value is the
  /// first error (requests after it are still resolved).
  Status ResolveAll(uint64_t fatbin_hash, const std::vector<KernelRequest>& requests,
                    std::vector<KernelSignature>* out, std::vector<Status>* statuses = nullptr);

  /// Writes every fatbin with new entries. No-op without a directory.
  Status Flush();

  Stats stats() const;

  /// Serialisation (exposed for tests and tools).
  struct Entry {
    KernelRequest request;
    KernelSignature signature;
    bool from_disk = false;
  };
  static std::string Serialize(uint64_t fatbin_hash, const std::map<std::string, Entry>& kernels);
  /// Corruption with a reason on any defect.
  static Status Deserialize(std::string_view bytes, uint64_t fatbin_hash,
                            std::map<std::string, Entry>* kernels);

 private:
  struct Fatbin {
    std::map<std::string, Entry> kernels;  // by mangled name (ordered: stable files)
    bool disk_checked = false;
    bool dirty = false;
  };

  Fatbin& LoadLocked(uint64_t fatbin_hash);  // requires mu_
  bool LookupLocked(uint64_t fatbin_hash, const KernelRequest& request, KernelSignature* out);
  Status FlushOne(uint64_t fatbin_hash);

  const std::string dir_;
  std::mutex write_mu_;        // serialises file writes; taken before mu_
  mutable std::mutex mu_;      // guards fatbins_ and stats_
  std::unordered_map<uint64_t, Fatbin> fatbins_;
  Stats stats_;
};

}  // namespace phos::signature
