// Public API of the PTX interpreter: run one kernel of a Program.
//
// Execution model (docs/instrument.md "PTX interpreter"): blocks are
// independent and run in parallel on a pool of host threads; the warps of
// a block run one after another on one host thread, each until none of its
// lanes can run: the lanes that stand at the same op execute it together
// (lockstep), lanes that branched apart run in turns (the group at the
// deepest frame and lowest pc first, so they meet again where the branches
// join) until they exit or wait at bar.sync or a warp collective
// (shfl/vote/match/redux/activemask/bar.warp.sync). A collective completes
// once every lane of its member mask waits at it; a barrier once every
// live thread of the block waits at one. A group or warp that runs long
// yields its turn, so lanes and warps spinning on each other's flags make
// progress.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "interp/device_output.h"
#include "interp/memory.h"
#include "interp/program.h"
#include "interp/texture.h"

namespace phos::interp {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct LaunchStats {
  uint64_t thread_instructions = 0;  // ops executed, summed over threads
  uint64_t blocks = 0;
};

struct LaunchOptions {
  // Host threads running blocks; 0 = std::thread::hardware_concurrency().
  unsigned workers = 0;
  // A thread executing more ops than this fails the launch (0 = no limit);
  // turns a hung kernel into an error.
  uint64_t max_instructions_per_thread = 0;
  // Filled in when non-null.
  LaunchStats* stats = nullptr;
  // When non-null and set (by another thread), no further block starts and
  // the launch ends with Unavailable once the running blocks finish: the owner
  // abandons the kernel (its app died; nobody will read the result).
  const std::atomic<bool>* cancel = nullptr;
  // A cooperative launch (cudaLaunchCooperativeKernel): every block of the
  // grid runs at once, each on a host thread of its own, so blocks may wait
  // for each other (cooperative_groups' grid.sync() spins until every block
  // has arrived). The caller bounds the grid (the device's co-resident
  // limit) and passes `grid_workspace`: the device address of at least 8
  // zeroed bytes that the kernel's %envreg1:%envreg2 point at (0 = none:
  // grid.sync() then traps, as on a GPU for a non-cooperative launch).
  bool cooperative = false;
  uint64_t grid_workspace = 0;
  // Where the kernel's printf (vprintf) text goes; null: it is discarded.
  DeviceOutput* device_output = nullptr;
  // The texture and surface objects the kernel's handles name (tex, suld,
  // sust, ...); null: none exist, such an instruction faults.
  const TextureTable* textures = nullptr;
  // The device heap device-side malloc/free use (ops_heap.cc): device
  // memory whose first bytes hold the allocator's state, so it may be
  // checkpointed and restored with it. 0: none (malloc/free fail the launch).
  uint64_t heap_base = 0;
  uint64_t heap_bytes = 0;
  // How the threads of a block are stepped. false (the default): the lanes
  // of a warp that stand at the same op run it together, register file in
  // lane-interleaved rows, common ops through whole-warp handlers
  // (warp_ops.cc). true: each thread alone, op by op, until it waits — the
  // interpreter as it was before issue #16's speed-up, kept as the
  // baseline interp_bench compares against and as the reference the
  // lockstep tests check the warp path's results with. Both run every
  // thread through the same ops; only the interleaving differs, and the
  // PTX memory model allows either.
  bool thread_at_a_time = false;
};

// Runs `kernel` (mangled .entry name) over `grid` x `block` threads.
// `params` is the kernel parameter buffer laid out as the .param list (each
// parameter at its natural alignment). Errors: NotFound (no such kernel),
// InvalidArgument (bad dimensions/params), NotSupported (an instruction the
// interpreter cannot run, named with its position), FailedPrecondition
// (illegal address, trap, deadlock at a barrier, ...). After an error, global
// memory may hold partial results of the blocks that ran.
Status LaunchKernel(const Program& program, const std::string& kernel, Dim3 grid, Dim3 block,
                    unsigned dynamic_shared_bytes, const uint8_t* params, size_t params_size,
                    GlobalMemory* global, const LaunchOptions& options = {});

}  // namespace phos::interp
