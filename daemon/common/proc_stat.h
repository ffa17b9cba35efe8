// What /proc/PID/stat says about a process: whether it still runs (a
// zombie does not: it is dead, only not reaped yet), its parent and its
// start time (which, with the pid, names one process for good: a pid is
// reused, a pid and start time are not). Used by the whole-process restore
// (is the image's original dead?) and by `phos run`'s launcher registry
// (is this program the child of that launcher, is that launcher alive?).
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace phos {

struct ProcStat {
  char state = '\0';            // 'R', 'S', 'D', 'T', 'Z', ...
  pid_t parent = 0;             // PPid, in our pid namespace (0: outside it)
  std::uint64_t start_ticks = 0;  // starttime, clock ticks after boot
  /// Not a zombie (dead, not reaped yet) nor dead.
  bool running() const { return state != 'Z' && state != 'X'; }
};

/// False when there is no process `pid` (or /proc cannot be read).
bool ReadProcStat(pid_t pid, ProcStat* out);

/// True while `pid` exists and is not a zombie.
bool ProcessRunning(pid_t pid);

}  // namespace phos
