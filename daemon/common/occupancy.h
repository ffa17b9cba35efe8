// The occupancy calculation (NVIDIA's CUDA Occupancy Calculator, the one
// cudaOccupancyMaxActiveBlocksPerMultiprocessor implements): how many
// blocks of a kernel fit on one SM at once, given the kernel's threads,
// registers and shared memory and the SM's limits. Pure functions, header
// only, so libphos.so (the occupancy API) and the sim backend (a kernel's
// register-limited maxThreadsPerBlock) share one definition.
//
// docs/interposer.md "Streams, functions, reset and fork" has the formula.
#pragma once

#include <algorithm>
#include <cstdint>

namespace phos::occupancy {

/// Per-SM limits of a device (the occupancy calculator's "GPU data").
struct SmLimits {
  int warp_size = 32;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int max_threads_per_block = 1024;
  int registers_per_sm = 65536;
  int registers_per_block = 65536;
  int register_alloc_unit = 256;       // registers are allocated per warp in units of this
  int warp_alloc_granularity = 4;      // warps' register files are handed out in groups of this
  int max_registers_per_thread = 255;
  std::uint64_t shared_per_sm = 228 * 1024;
  std::uint64_t shared_per_block_optin = 227 * 1024;
  std::uint64_t shared_alloc_unit = 128;
  std::uint64_t reserved_shared_per_block = 1024;  // the driver's per-block reservation (cc >= 8.0)
};

/// The limits for compute capability `major.minor`, with the figures a
/// device reports (threads per SM, registers, shared memory) taken from it.
/// max_blocks_per_sm and the reserved shared memory follow the CUDA C++
/// Programming Guide's "Technical Specifications per Compute Capability".
inline SmLimits LimitsFor(int major, int minor, int warp_size, int max_threads_per_sm,
                          int max_threads_per_block, int registers_per_sm, int registers_per_block,
                          std::uint64_t shared_per_sm, std::uint64_t shared_per_block_optin) {
  SmLimits l;
  l.warp_size = warp_size > 0 ? warp_size : 32;
  l.max_threads_per_sm = max_threads_per_sm;
  l.max_threads_per_block = max_threads_per_block;
  l.registers_per_sm = registers_per_sm;
  l.registers_per_block = registers_per_block;
  l.shared_per_sm = shared_per_sm;
  l.shared_per_block_optin = shared_per_block_optin;
  const int cc = major * 10 + minor;
  if (cc == 75 || cc == 86 || cc == 87 || cc == 89 || cc == 120 || cc == 121) {
    l.max_blocks_per_sm = cc == 75 || cc == 86 || cc == 87 ? 16 : (cc == 89 ? 24 : 32);
  } else {
    l.max_blocks_per_sm = cc < 50 ? 16 : 32;
  }
  l.reserved_shared_per_block = cc >= 80 ? 1024 : 0;
  return l;
}

/// What one block of a launch uses.
struct BlockUse {
  int threads = 0;
  int registers_per_thread = 0;        // 0 = unknown, no register limit
  std::uint64_t shared_bytes = 0;      // static + dynamic
};

/// Each limit separately (for tests and diagnostics); `blocks` is the min.
struct Occupancy {
  int by_warps = 0;
  int by_registers = 0;
  int by_shared = 0;
  int by_blocks = 0;
  int blocks = 0;
};

inline std::int64_t CeilTo(std::int64_t v, std::int64_t unit) { return unit > 0 ? (v + unit - 1) / unit * unit : v; }

/// Active blocks per SM. 0 when one block does not fit at all (too many
/// threads, registers or shared memory for a block).
inline Occupancy MaxActiveBlocks(const SmLimits& l, const BlockUse& u) {
  Occupancy o;
  if (u.threads <= 0 || u.threads > l.max_threads_per_block) return o;
  const int warps_per_block = static_cast<int>((u.threads + l.warp_size - 1) / l.warp_size);
  const int max_warps = l.max_threads_per_sm / l.warp_size;
  o.by_warps = max_warps / warps_per_block;
  o.by_blocks = l.max_blocks_per_sm;

  constexpr int kUnlimited = 1 << 30;
  if (u.registers_per_thread <= 0) {
    o.by_registers = kUnlimited;
  } else if (u.registers_per_thread > l.max_registers_per_thread) {
    o.by_registers = 0;
  } else {
    const std::int64_t regs_per_warp = CeilTo(std::int64_t{u.registers_per_thread} * l.warp_size, l.register_alloc_unit);
    if (regs_per_warp * warps_per_block > l.registers_per_block) {
      o.by_registers = 0;
    } else {
      // Warps whose registers fit in one SM, in whole allocation groups.
      std::int64_t warps = l.registers_per_sm / regs_per_warp;
      warps = warps / l.warp_alloc_granularity * l.warp_alloc_granularity;
      o.by_registers = static_cast<int>(warps / warps_per_block);
    }
  }

  if (u.shared_bytes > l.shared_per_block_optin) {
    o.by_shared = 0;
  } else {
    const std::uint64_t per_block =
        static_cast<std::uint64_t>(CeilTo(static_cast<std::int64_t>(u.shared_bytes + l.reserved_shared_per_block),
                                          static_cast<std::int64_t>(l.shared_alloc_unit)));
    o.by_shared = per_block == 0 ? kUnlimited : static_cast<int>(l.shared_per_sm / per_block);
  }
  o.blocks = std::min({o.by_warps, o.by_registers, o.by_shared, o.by_blocks});
  return o;
}

/// The largest block size (a multiple of the warp size, at most the
/// device's limit) whose registers fit in one block: what cuFuncGetAttribute
/// reports as CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK for a kernel without
/// launch bounds.
inline int MaxThreadsPerBlockForRegisters(const SmLimits& l, int registers_per_thread) {
  if (registers_per_thread <= 0) return l.max_threads_per_block;
  if (registers_per_thread > l.max_registers_per_thread) return 0;
  const std::int64_t regs_per_warp = CeilTo(std::int64_t{registers_per_thread} * l.warp_size, l.register_alloc_unit);
  const std::int64_t warps = l.registers_per_block / regs_per_warp;
  return static_cast<int>(std::min<std::int64_t>(warps * l.warp_size, l.max_threads_per_block));
}

}  // namespace phos::occupancy
