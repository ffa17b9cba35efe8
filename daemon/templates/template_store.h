// TemplateStore: where phosd keeps serverless templates (docs/templates.md).
//
// A template is a whole-process image (process_checkpoint.h) under a name:
//
//   ROOT/NAME/                 the committed template (ROOT =
//                              <checkpoint root>/templates)
//   ROOT/NAME/manifest         its TemplateRecord (proto/image.proto): name,
//                              id, source pid/command, mode, save time, size;
//                              added before the commit
//   ROOT/.staging/             saves in progress (CheckpointProcess writes
//                              .staging/NAME, itself via .staging/NAME.tmp);
//                              emptied when the store opens
//   CACHE/NAME/                the in-memory copy starts restore from (tmpfs)
//   CACHE/.staging/            cache copies in progress
//
// Commit: the staged image's manifest gets the TemplateRecord (fsync'ed), then
// the directory is renamed to
// ROOT/NAME — RENAME_EXCHANGE with the old template if there is one, whose
// directory (now in .staging) is removed afterwards — so ROOT/NAME is always
// either the old or the new complete template, never a mix or nothing.
//
// Host-memory tier: CACHE is a tmpfs directory (--template-cache; default
// /dev/shm/phos-templates-<uid>-<hash of ROOT>), checked with statfs; when it
// is not tmpfs, cannot be created, or is not a private directory of phosd's
// uid, the store runs without a cache (starts read ROOT) and says why in
// cache_note() and the log. A cache copy is valid iff its TemplateRecord
// carries the id of the committed template (each save draws a new id); on
// open, stale or orphaned copies are removed and missing ones are filled by
// a background thread; a start that finds no valid copy fills it first.
// CACHE is created with the first copy and removed when phosd stops if it
// holds none (a phosd without templates leaves nothing in /dev/shm).
//
// Verified once: every checksum of a cache copy's gpu.img is verified when
// the copy is made (before it is installed: a copy that fails is never
// used) or, for a copy an earlier phosd made, by the warm-up thread or the
// first start. The identity of its `manifest` and `gpu.img` (inode, size,
// mtime, ctime) is recorded then, and StartDir reports the copy as verified
// only while both files still have it: a start then skips the full
// pre-restore verification (engine RestoreOptions::verified; chunks are
// still verified as they load). A copy whose files changed is verified
// again; one that fails is removed and copied again from ROOT (whose
// verification then fails too if ROOT is damaged, and the start restores
// from ROOT with full verification: it is refused, naming what is corrupt).
// Starts from ROOT (no cache) always verify: a disk file can rot without
// its identity changing.
//
// Locking: `mu_` guards entries_ and every Entry's fields except `op`. Each
// Entry's `op` mutex (held through a Lease) serialises the long operations
// on one name — save, start, remove, cache fill — so no two of them touch
// ROOT/NAME or CACHE/NAME at once. Order: op before mu_; mu_ is never held
// across file I/O; the `alive` predicates run under mu_ (they may take the
// SessionRegistry's mutex: mu_ before it, never the reverse). Entries are
// never erased (a removed template's entry is marked absent), so a Lease's
// entry stays the name's entry.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace phos::templates {


struct TemplateMeta {
  std::string name;
  std::uint64_t id = 0;  // drawn per save; names the cache copy's version
  std::uint64_t saved_unix_ms = 0;
  pid_t source_pid = 0;
  std::string source_command;
  std::string mode;  // checkpoint mode of the save
  std::uint64_t bytes = 0;
};

/// A process on this phosd started from a template (or its source, saved
/// with leave_running): it holds the template's device addresses while its
/// session lives.
struct TemplateInstance {
  pid_t pid = 0;
  std::uint64_t session_id = 0;
  bool source = false;
};

struct TemplateView {
  TemplateMeta meta;
  std::string dir;
  std::string cache_dir;  // "" = no valid copy in the cache
  std::vector<TemplateInstance> instances;
};

class TemplateStore {
 public:
  struct Options {
    std::string root;        // <checkpoint root>/templates
    std::string cache_root;  // "" = no cache
    bool warm = true;        // fill missing cache copies in the background
    /// Run first by the warm-up thread when a template exists at Open
    /// (phosd: CriuClient::Check(), whose answer is then cached for the
    /// first start). Empty = none.
    std::function<void()> prepare;
  };
  static Status Open(const Options& options, std::unique_ptr<TemplateStore>* out);
  ~TemplateStore();  // stops the warm-up thread (after the copy in progress)
  TemplateStore(const TemplateStore&) = delete;
  TemplateStore& operator=(const TemplateStore&) = delete;

  /// InvalidArgument unless NAME is 1-100 of [A-Za-z0-9_.-], not starting
  /// with '.' and not ending in ".tmp".
  static Status CheckName(const std::string& name);
  /// /dev/shm/phos-templates-<euid>-<hash of root>.
  static std::string DefaultCacheRoot(const std::string& root);

  const std::string& root() const { return root_; }
  const std::string& cache_root() const { return cache_root_; }  // "" = no cache
  const std::string& cache_note() const { return cache_note_; }  // why there is none

  struct Entry;
  /// The exclusive right to operate on one name (holds its `op` mutex).
  class Lease {
   public:
    const std::string& name() const { return name_; }

   private:
    friend class TemplateStore;
    std::string name_;
    std::shared_ptr<Entry> entry_;
    std::unique_lock<std::mutex> lock_;
  };
  /// Blocks while another operation on `name` runs. `name` must pass CheckName.
  Lease Acquire(const std::string& name);

  /// False when no template of that name is committed.
  bool Get(const Lease& lease, TemplateMeta* meta) const;
  std::string DirOf(const std::string& name) const { return root_ + "/" + name; }

  /// An empty path under ROOT/.staging for CheckpointProcess to create
  /// (leftovers of that name removed).
  Status PrepareStaging(const Lease& lease, std::string* dir);
  /// Commits the staged image as the template (see the file comment).
  /// `meta.bytes` is filled here. On failure the old template is intact.
  Status Commit(const Lease& lease, const std::string& staged, TemplateMeta* meta);
  /// The directory a start restores from: the valid, verified cache copy
  /// (made first if missing: *fill_ms > 0; verified first if not yet or
  /// changed), or ROOT/NAME without a cache or when that fails (logged).
  /// *verified: every checksum of *dir was verified and its files did not
  /// change since (the restore may skip its full verification); false for
  /// ROOT/NAME. NotFound when no template is committed.
  Status StartDir(const Lease& lease, std::string* dir, bool* from_cache, std::uint64_t* fill_ms, bool* verified);
  /// Makes sure the cache holds a verified copy of the template (after a
  /// save; the warm-up thread). No-op without a cache.
  Status Fill(const Lease& lease, std::uint64_t* fill_ms);
  /// Removes the template (and its cache copy). NotFound when none.
  Status Remove(const Lease& lease);

  /// Instances: recorded by start (and save with leave_running); the
  /// caller's `alive` predicate prunes those whose session ended.
  void AddInstance(const Lease& lease, const TemplateInstance& instance);
  std::vector<TemplateInstance> LiveInstances(const Lease& lease,
                                              const std::function<bool(const TemplateInstance&)>& alive);
  /// Every committed template, sorted by name; instances pruned with `alive`.
  std::vector<TemplateView> List(const std::function<bool(const TemplateInstance&)>& alive);

 private:
  explicit TemplateStore(const Options& options);
  Status Load();             // reads ROOT and reconciles CACHE (single-threaded, at Open)
  void SetUpCache(const std::string& wanted);
  Status EnsureCacheDir();   // creates cache_root_ (0700) and re-checks it
  Status FillLocked(const Lease& lease, const TemplateMeta& meta, std::uint64_t* fill_ms);
  bool CacheValid(const Lease& lease, std::string* dir) const;
  /// The valid cache copy, verified now unless its recorded identity still
  /// matches; a copy failing verification is removed and made again.
  Status VerifiedCopy(const Lease& lease, const TemplateMeta& meta, std::string* dir, std::uint64_t* fill_ms);
  void WarmLoop(const std::function<void()>& prepare);

  const std::string root_;
  std::string cache_root_;  // set at Open, read-only after
  std::string cache_note_;  // ditto
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;  // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::thread warm_;
};

}  // namespace phos::templates
