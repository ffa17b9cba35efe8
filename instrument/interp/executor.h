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

}  // namespace phos::interp
