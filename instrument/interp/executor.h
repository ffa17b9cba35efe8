// Runs one block of a kernel (internal to phos_interp; see launch.h for the
// execution model). The Block belongs to the calling worker thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "interp/exec.h"

namespace phos::interp {

// Runs every thread of `b` (already sized: ids, dims, shared memory) to
// completion. Adds the ops executed to *icount.
Status RunBlock(Block& b, int kernel, const uint8_t* params, size_t params_size, uint64_t* icount);

// lockstep.cc: runs the lanes of warp `w` until none can run (each waits or
// has exited; warp collectives whose lanes have all arrived complete here)
// or the warp used its turn (*yielded: lanes can still run). `entering`:
// the block's first round, every lane at the kernel's first op.
Status RunWarp(Block& b, uint32_t w, bool entering, bool* yielded);

// Shared by the two schedulers (executor.cc).
std::string ThreadName(const Block& b, const Thread& t);  // "block (x,y,z) thread (x,y,z)"
// Lanes of warp `w` (nullptr past the block's end); returns the ones that exist.
uint32_t WarpLanes(Block& b, uint32_t w, Thread** lanes);
// Completes the warp collectives of warp `w` whose member lanes have all
// arrived; *progress when one did.
Status ResolveWarpCollectives(Block& b, uint32_t w, bool* progress);

}  // namespace phos::interp
