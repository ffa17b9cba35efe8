// The pid namespaces a process is in, from the NSpid line of
// /proc/PID/status (Linux >= 4.1). Used by phosd to tell an app started by
// `phos run` (pid 1 of its own namespace) from one in phosd's namespace:
// the hello check of the ring channel and the whole-process checkpoint's
// pid namespace role.
#pragma once

#include <sys/types.h>

#include <vector>

#include "common/status.h"

namespace phos {

/// `pid`'s number in each pid namespace it belongs to, from the namespace
/// of our /proc mount (first, = `pid` itself) to its innermost one (last:
/// the pid the process sees as its own). One entry when it is in our
/// namespace only; empty when the kernel has no NSpid line (no pid
/// namespaces to care about). NotFound when there is no such process.
Status ReadNsPids(pid_t pid, std::vector<long>* ids);

}  // namespace phos
