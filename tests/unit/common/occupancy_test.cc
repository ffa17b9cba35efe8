// The occupancy calculator (common/occupancy.h) against values worked out
// by hand from the CUDA Occupancy Calculator's rules.
#include "common/occupancy.h"

#include <gtest/gtest.h>

namespace phos::occupancy {
namespace {

// An H100 SXM as cudaGetDeviceProperties reports it.
SmLimits H100() { return LimitsFor(9, 0, 32, 2048, 1024, 65536, 65536, 233472, 232448); }

Occupancy Blocks(const SmLimits& l, int threads, int regs, std::uint64_t shared) {
  return MaxActiveBlocks(l, BlockUse{threads, regs, shared});
}

TEST(Occupancy, LimitsFollowTheComputeCapability) {
  EXPECT_EQ(H100().max_blocks_per_sm, 32);
  EXPECT_EQ(H100().reserved_shared_per_block, 1024u);
  EXPECT_EQ(LimitsFor(8, 6, 32, 1536, 1024, 65536, 65536, 102400, 101376).max_blocks_per_sm, 16);
  EXPECT_EQ(LimitsFor(8, 9, 32, 1536, 1024, 65536, 65536, 102400, 101376).max_blocks_per_sm, 24);
  EXPECT_EQ(LimitsFor(7, 0, 32, 2048, 1024, 65536, 65536, 98304, 98304).reserved_shared_per_block, 0u);
}

TEST(Occupancy, WarpLimited) {
  // 256 threads = 8 warps; 64 warps per SM -> 8. Registers: 32*32 = 1024
  // per warp -> 64 warps -> 8 blocks. Shared: 1 KiB reserved -> 228.
  Occupancy o = Blocks(H100(), 256, 32, 0);
  EXPECT_EQ(o.by_warps, 8);
  EXPECT_EQ(o.by_registers, 8);
  EXPECT_EQ(o.by_shared, 228);
  EXPECT_EQ(o.blocks, 8);
}

TEST(Occupancy, RegisterLimited) {
  // 128 threads, 64 regs: 2048 regs per warp -> 32 warps -> 8 blocks of 4.
  // Shared 16 KiB + 1 KiB = 17408 -> 233472 / 17408 = 13.
  Occupancy o = Blocks(H100(), 128, 64, 16 * 1024);
  EXPECT_EQ(o.by_warps, 16);
  EXPECT_EQ(o.by_registers, 8);
  EXPECT_EQ(o.by_shared, 13);
  EXPECT_EQ(o.blocks, 8);
}

TEST(Occupancy, RegisterWarpGranularity) {
  // 96 threads (3 warps), 40 regs: 1280 per warp -> 51 warps, in groups of
  // 4 -> 48 -> 16 blocks (not 17).
  Occupancy o = Blocks(H100(), 96, 40, 0);
  EXPECT_EQ(o.by_registers, 16);
  EXPECT_EQ(o.by_warps, 21);
  EXPECT_EQ(o.blocks, 16);
}

TEST(Occupancy, SharedMemoryLimited) {
  // 100 KiB + 1 KiB reserved = 103424 -> 2 per SM.
  EXPECT_EQ(Blocks(H100(), 256, 32, 100 * 1024).blocks, 2);
  // Rounded to 128-byte units: 1000 + 1024 -> 2048 -> 114.
  EXPECT_EQ(Blocks(H100(), 32, 16, 1000).by_shared, 114);
  // More than the opt-in maximum: does not fit at all.
  EXPECT_EQ(Blocks(H100(), 256, 32, 232449).blocks, 0);
}

TEST(Occupancy, BlockLimited) {
  // 64 threads, 16 regs, no shared: warps allow 32, registers 64, blocks 32.
  EXPECT_EQ(Blocks(H100(), 64, 16, 0).blocks, 32);
  SmLimits ampere86 = LimitsFor(8, 6, 32, 1536, 1024, 65536, 65536, 102400, 101376);
  EXPECT_EQ(Blocks(ampere86, 32, 16, 0).blocks, 16);
}

TEST(Occupancy, BlocksThatCannotLaunch) {
  // 1024 threads * 72 regs: 2304 per warp * 32 warps > 65536 per block.
  EXPECT_EQ(Blocks(H100(), 1024, 72, 0).blocks, 0);
  EXPECT_EQ(Blocks(H100(), 1025, 16, 0).blocks, 0);
  EXPECT_EQ(Blocks(H100(), 0, 16, 0).blocks, 0);
  EXPECT_EQ(Blocks(H100(), 32, 256, 0).blocks, 0);  // over 255 registers
}

TEST(Occupancy, MaxThreadsPerBlockForRegisters) {
  EXPECT_EQ(MaxThreadsPerBlockForRegisters(H100(), 32), 1024);
  EXPECT_EQ(MaxThreadsPerBlockForRegisters(H100(), 128), 512);  // 4096 per warp -> 16 warps
  EXPECT_EQ(MaxThreadsPerBlockForRegisters(H100(), 255), 256);  // 8160 -> 8192 per warp -> 8 warps
  EXPECT_EQ(MaxThreadsPerBlockForRegisters(H100(), 0), 1024);
}

}  // namespace
}  // namespace phos::occupancy
