// LazyCopyGuard: a lazily restored process must not outlive its phosd
// before its memory has arrived (docs/migration.md "Lazy pages").
//
// During a lazy restore the copy runs while `criu lazy-pages` still feeds
// it pages from the source. If phosd dies then (kill -9, OOM), the source
// cannot confirm the migration and resumes its own process; the lazy-pages
// daemon, left without its owner, eventually loses its page server, and
// from then on every page the copy had not received reads as zeros — a
// process silently running on wrong memory, beside the original. phosd's
// own failure paths kill the copy; this covers phosd's death.
//
// Start() forks a guard: a small child holding a pidfd of the copy and the
// read end of a pipe whose only write end phosd holds (close-on-exec, and
// closed in every other child phos forks without exec). The guard blocks in
// read(): a byte (Release) and it exits, leaving the copy alone; end of
// file — phosd is gone, however it died — and it SIGKILLs the copy through
// the pidfd (never a pid that may have been reused), then exits.
//
// Threading: owned by the one thread that runs the restore. The guard
// child runs only async-signal-safe calls (phosd is multithreaded).
#pragma once

#include <sys/types.h>

#include "common/status.h"

namespace phos::process {

class LazyCopyGuard {
 public:
  LazyCopyGuard() = default;
  ~LazyCopyGuard() { Release(); }
  LazyCopyGuard(const LazyCopyGuard&) = delete;
  LazyCopyGuard& operator=(const LazyCopyGuard&) = delete;

  /// Guards `copy` (a running pid). Fails (guarding nothing) when the
  /// copy cannot be opened as a pidfd or the guard cannot be forked.
  Status Start(pid_t copy);
  /// The copy's memory is complete (or the copy was killed): the guard
  /// exits without touching it, and is reaped. true when the guard said it
  /// left the copy alone (exit status 0); false when it killed it or
  /// could not tell, or when no guard ran. Idempotent.
  bool Release();
  /// The guard's pid while it runs (tests), else 0.
  pid_t guard_pid() const { return guard_; }

 private:
  pid_t guard_ = 0;
  int release_fd_ = -1;  // the pipe's write end
};

}  // namespace phos::process
