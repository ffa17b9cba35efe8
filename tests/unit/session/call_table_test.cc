// The table of forwarded calls (interposer/protocol/calls.def, calls.h) and
// phosd's dispatch built from it (daemon/session/call_handlers.cc): ids are
// unique and unchanged on the wire, every row is dispatched to its handler,
// staging is refused where a row does not allow it, unknown ids and
// malformed payloads are answered without touching the session, and the
// access rules give the copy/memset/free rows their operands.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "protocol/blas_spec.h"
#include "protocol/calls.h"
#include "session/access_spec.h"
#include "session/call_handlers.h"

namespace phos::session {
namespace {

using wire::ApiId;
using wire::CallRow;
using wire::WireStatus;

/// Dispatches one record against an empty SessionState (no context, no
/// ring): fine for every answer that must come before a handler touches
/// the session.
Outcome DispatchBare(uint32_t api, std::span<const std::byte> payload, bool staged, bool call = true) {
  SessionState st;
  ring::Record rec;
  rec.header.api_id = api;
  rec.header.flags = call ? ring::kFlagWantsReply : 0;
  rec.has_staging = staged;
  Outcome out;
  Dispatch(st, rec, payload, &out);
  return out;
}

TEST(CallTableTest, IdsAndNamesAreUnique) {
  std::set<uint32_t> ids;
  std::set<std::string> ops;
  for (const CallRow& r : wire::kCalls) {
    EXPECT_TRUE(ids.insert(static_cast<uint32_t>(r.id)).second) << r.op << ": id used by another row";
    EXPECT_TRUE(ops.insert(r.op).second) << r.op << ": op name used twice";
  }
  EXPECT_EQ(ids.size(), wire::kCallCount);
}

TEST(CallTableTest, IdsAreGeneratedOrPrivate) {
  for (const CallRow& r : wire::kCalls) {
    const auto id = static_cast<uint32_t>(r.id);
    const bool generated = id < interposer::kApiCount;
    const bool phos_private = id >= 0x10000;
    EXPECT_TRUE(generated || phos_private) << r.op << " = " << id;
    EXPECT_EQ(phos_private, std::string(r.api).rfind("phos", 0) == 0) << r.op << " (" << r.api << ")";
  }
}

// Wire compatibility: the numeric ids of the ops that existed before the
// table (the canonical ApiIds wire.h listed by hand) are unchanged.
TEST(CallTableTest, WireIdsAreTheCanonicalApiIds) {
  namespace op = wire::op;
  const std::vector<std::pair<ApiId, ApiId>> expected = {
      {op::kGetDeviceCount, ApiId::k_cudaGetDeviceCount},
      {op::kGetDeviceProperties, ApiId::k_cudaGetDeviceProperties},
      {op::kDeviceGetAttribute, ApiId::k_cudaDeviceGetAttribute},
      {op::kMemGetInfo, ApiId::k_cudaMemGetInfo},
      {op::kMalloc, ApiId::k_cudaMalloc},
      {op::kFree, ApiId::k_cudaFree},
      {op::kMemcpy, ApiId::k_cudaMemcpy},
      {op::kMemcpyAsync, ApiId::k_cudaMemcpyAsync},
      {op::kMemset, ApiId::k_cudaMemset},
      {op::kMemsetAsync, ApiId::k_cudaMemsetAsync},
      {op::kStreamCreate, ApiId::k_cudaStreamCreateWithPriority},
      {op::kStreamDestroy, ApiId::k_cudaStreamDestroy},
      {op::kStreamSynchronize, ApiId::k_cudaStreamSynchronize},
      {op::kStreamQuery, ApiId::k_cudaStreamQuery},
      {op::kStreamWaitEvent, ApiId::k_cudaStreamWaitEvent},
      {op::kEventCreate, ApiId::k_cudaEventCreateWithFlags},
      {op::kEventRecord, ApiId::k_cudaEventRecord},
      {op::kEventQuery, ApiId::k_cudaEventQuery},
      {op::kEventSynchronize, ApiId::k_cudaEventSynchronize},
      {op::kEventElapsedTime, ApiId::k_cudaEventElapsedTime},
      {op::kEventDestroy, ApiId::k_cudaEventDestroy},
      {op::kDeviceSynchronize, ApiId::k_cudaDeviceSynchronize},
      {op::kGetLastError, ApiId::k_cudaGetLastError},
      {op::kPeekAtLastError, ApiId::k_cudaPeekAtLastError},
      {op::kModuleLoad, ApiId::k_cuModuleLoadData},
      {op::kModuleUnload, ApiId::k_cuModuleUnload},
      {op::kModuleGetFunction, ApiId::k_cuModuleGetFunction},
      {op::kModuleGetGlobal, ApiId::k_cuModuleGetGlobal_v2},
      {op::kLaunchKernel, ApiId::k_cuLaunchKernel},
      {op::kFuncGetAttributes, ApiId::k_cuFuncGetAttribute},
      {op::kFuncSetAttribute, ApiId::k_cuFuncSetAttribute},
      {op::kDeviceReset, ApiId::k_cudaDeviceReset},
      {op::kHostSegmentRegister, ApiId::k_cudaMallocHost},
      {op::kMemcpy2D, ApiId::k_cudaMemcpy2D},
      {op::kMemcpy2DAsync, ApiId::k_cudaMemcpy2DAsync},
      {op::kMemset2D, ApiId::k_cudaMemset2D},
      {op::kMemset2DAsync, ApiId::k_cudaMemset2DAsync},
      {op::kFreeAsync, ApiId::k_cudaFreeAsync},
      {op::kLaunchHostFunc, ApiId::k_cudaLaunchHostFunc},
      {op::kDeviceSetLimit, ApiId::k_cudaDeviceSetLimit},
      {op::kCreateTextureObject, ApiId::k_cudaCreateTextureObject},
      {op::kCreateSurfaceObject, ApiId::k_cudaCreateSurfaceObject},
      {op::kDestroyTextureObject, ApiId::k_cudaDestroyTextureObject},
      {op::kDestroySurfaceObject, ApiId::k_cudaDestroySurfaceObject},
      {op::kBlasGemm, ApiId::k_cublasGemmStridedBatchedEx},
      {op::kBlasGemmBatched, ApiId::k_cublasGemmBatchedEx},
      {op::kBlasGemv, ApiId::k_cublasSgemvStridedBatched},
      {op::kBlasGeam, ApiId::k_cublasSgeam},
      {op::kBlasGer, ApiId::k_cublasSger_v2},
      {op::kBlasSyrk, ApiId::k_cublasSsyrk_v2},
      {op::kBlasTrsm, ApiId::k_cublasStrsm_v2},
      {op::kBlasGemvBatched, ApiId::k_cublasSgemvBatched},
      {op::kBlasTrsmBatched, ApiId::k_cublasStrsmBatched},
      {op::kBlasRot, ApiId::k_cublasSrot_v2},
      {op::kBlasGetrfBatched, ApiId::k_cublasSgetrfBatched},
      {op::kBlasGetrsBatched, ApiId::k_cublasSgetrsBatched},
      {op::kBlasGetriBatched, ApiId::k_cublasSgetriBatched},
      {op::kBlasGbmv, ApiId::k_cublasSgbmv_v2},
      {op::kBlasSbmv, ApiId::k_cublasSsbmv_v2},
      {op::kBlasTbmv, ApiId::k_cublasStbmv_v2},
      {op::kBlasTbsv, ApiId::k_cublasStbsv_v2},
      {op::kBlasSpmv, ApiId::k_cublasSspmv_v2},
      {op::kBlasSpr, ApiId::k_cublasSspr_v2},
      {op::kBlasSpr2, ApiId::k_cublasSspr2_v2},
      {op::kBlasTpmv, ApiId::k_cublasStpmv_v2},
      {op::kBlasTpsv, ApiId::k_cublasStpsv_v2},
      {op::kBlasSymm, ApiId::k_cublasSsymm_v2},
      {op::kBlasSyr2k, ApiId::k_cublasSsyr2k_v2},
      {op::kBlasSyrkx, ApiId::k_cublasSsyrkx},
      {op::kBlasTrmm, ApiId::k_cublasStrmm_v2},
      {op::kBlasSymv, ApiId::k_cublasSsymv_v2},
      {op::kBlasTrmv, ApiId::k_cublasStrmv_v2},
      {op::kBlasTrsv, ApiId::k_cublasStrsv_v2},
      {op::kBlasSyr, ApiId::k_cublasSsyr_v2},
      {op::kBlasSyr2, ApiId::k_cublasSsyr2_v2},
      {op::kBlasDgmm, ApiId::k_cublasSdgmm},
      {op::kBlasAxpy, ApiId::k_cublasAxpyEx},
      {op::kBlasScal, ApiId::k_cublasScalEx},
      {op::kBlasCopy, ApiId::k_cublasCopyEx},
      {op::kBlasSwap, ApiId::k_cublasSwapEx},
      {op::kBlasDot, ApiId::k_cublasDotEx},
      {op::kBlasNrm2, ApiId::k_cublasNrm2Ex},
      {op::kBlasAsum, ApiId::k_cublasAsumEx},
      {op::kBlasIamax, ApiId::k_cublasIsamax_v2},
      {op::kBlasIamin, ApiId::k_cublasIsamin_v2},
      {op::kBlasLtMatmul, ApiId::k_cublasLtMatmul},
      {op::kBlasProbe, static_cast<ApiId>(0x10001)},
      {op::kHostCopyStats, static_cast<ApiId>(0x10000)},
      {op::kTakeDeviceOutput, static_cast<ApiId>(0x10002)},
      {op::kSetDevice, ApiId::k_cudaSetDevice},
      {op::kNcclCommInitRank, ApiId::k_ncclCommInitRank},
      {op::kNcclCommFinalize, ApiId::k_ncclCommFinalize},
      {op::kNcclCommDestroy, ApiId::k_ncclCommDestroy},
      {op::kNcclCommAbort, ApiId::k_ncclCommAbort},
      {op::kNcclCommGetAsyncError, ApiId::k_ncclCommGetAsyncError},
      {op::kNcclGroup, ApiId::k_ncclGroupEnd},
      {op::kMemAddressReserve, ApiId::k_cuMemAddressReserve},
      {op::kMemAddressFree, ApiId::k_cuMemAddressFree},
      {op::kMemMap, ApiId::k_cuMemMap},
      {op::kMemUnmap, ApiId::k_cuMemUnmap},
  };
  for (const auto& [got, want] : expected) {
    EXPECT_EQ(static_cast<uint32_t>(got), static_cast<uint32_t>(want));
    EXPECT_NE(wire::FindCallRow(got), nullptr) << static_cast<uint32_t>(got);
  }
  EXPECT_EQ(expected.size(), wire::kCallCount) << "a new row: add its id here";
}

TEST(CallTableTest, EveryRowIsDispatchedToItsHandler) {
  for (const CallRow& r : wire::kCalls) {
    EXPECT_EQ(DispatchedRow(r.id), &r) << r.op;
    EXPECT_EQ(wire::FindCallRow(r.id), &r) << r.op;
  }
  EXPECT_EQ(DispatchedRow(static_cast<ApiId>(0x10003)), nullptr);
}

TEST(CallTableTest, StagingIsRefusedForRowsThatDoNotAllowIt) {
  std::set<std::string> staged;
  for (const CallRow& r : wire::kCalls) {
    if (r.staged()) {
      staged.insert(r.op);
      continue;
    }
    std::vector<std::byte> payload(r.request_bytes);
    Outcome out = DispatchBare(static_cast<uint32_t>(r.id), payload, /*staged=*/true);
    EXPECT_EQ(out.status, WireStatus::kNotSupported) << r.op;
    EXPECT_NE(out.message.find("staged"), std::string::npos) << r.op << ": " << out.message;
  }
  // The calls that carry staging pieces today.
  EXPECT_EQ(staged, (std::set<std::string>{"Memcpy", "MemcpyAsync", "ModuleLoad", "Memcpy2DAsync"}));
}

TEST(CallTableTest, UnknownIdsAnswerNotSupported) {
  std::set<uint32_t> rows;
  for (const CallRow& r : wire::kCalls) rows.insert(static_cast<uint32_t>(r.id));
  std::vector<uint32_t> unknown = {0x10003, 0x7fffffff, 0xffffffff, static_cast<uint32_t>(interposer::kApiCount)};
  for (uint32_t id = 0; id < interposer::kApiCount && unknown.size() < 40; id += 37) {
    if (!rows.count(id)) unknown.push_back(id);
  }
  const std::byte junk[16] = {};
  for (uint32_t id : unknown) {
    for (bool staged : {false, true}) {
      Outcome out = DispatchBare(id, junk, staged);
      EXPECT_EQ(out.status, WireStatus::kNotSupported) << id;
    }
  }
}

TEST(CallTableTest, PayloadsOfTheWrongSizeAreInvalidBeforeAnyHandlerRuns) {
  for (const CallRow& r : wire::kCalls) {
    std::vector<std::byte> longer(r.request_bytes + 1);
    if (r.shape == wire::PayloadShape::kExact) {
      EXPECT_EQ(DispatchBare(static_cast<uint32_t>(r.id), longer, false).status, WireStatus::kInvalidValue) << r.op;
    }
    if (r.request_bytes > 0) {
      std::vector<std::byte> shorter(r.request_bytes - 1);
      EXPECT_EQ(DispatchBare(static_cast<uint32_t>(r.id), shorter, false).status, WireStatus::kInvalidValue)
          << r.op;
      EXPECT_EQ(DispatchBare(static_cast<uint32_t>(r.id), {}, false).status, WireStatus::kInvalidValue) << r.op;
    }
  }
}

TEST(CallTableTest, RepliesFitACompletionSlot) {
  for (const CallRow& r : wire::kCalls) {
    EXPECT_LE(r.reply_bytes, ring::kSlotResultBytes) << r.op;
    if (r.reply_variable) {
      EXPECT_EQ(r.reply_bytes, 0u) << r.op;
    }
  }
}

TEST(CallTableTest, AccessRulesGiveTheSpecRows) {
  for (const CallRow& r : wire::kCalls) {
    const CallSpec* spec = FindCallSpec(r.id);
    switch (r.access) {
      case wire::AccessRule::kCopy:
        ASSERT_NE(spec, nullptr) << r.op;
        EXPECT_EQ(spec->operand_count, 2u) << r.op;
        EXPECT_EQ(spec->operands[kDstOperand].role, ArgRole::kWrite) << r.op;
        EXPECT_EQ(spec->operands[kSrcOperand].role, ArgRole::kRead) << r.op;
        break;
      case wire::AccessRule::kFill:
      case wire::AccessRule::kRelease:
        ASSERT_NE(spec, nullptr) << r.op;
        EXPECT_EQ(spec->operand_count, 1u) << r.op;
        EXPECT_EQ(spec->operands[kDstOperand].role, ArgRole::kWrite) << r.op;
        break;
      case wire::AccessRule::kBlas:
        ASSERT_NE(spec, nullptr) << r.op;
        EXPECT_EQ(spec->operand_count, static_cast<uint32_t>(wire::kBlasSlotCount)) << r.op;
        EXPECT_EQ(spec->operands[wire::kBlasSlotA].role, ArgRole::kRead) << r.op;
        EXPECT_EQ(spec->operands[wire::kBlasSlotC].role, ArgRole::kReadWrite) << r.op;
        EXPECT_EQ(spec->operands[wire::kBlasSlotResult].role, ArgRole::kWrite) << r.op;
        break;
      case wire::AccessRule::kCollective:
        ASSERT_NE(spec, nullptr) << r.op;
        EXPECT_EQ(spec->operand_count, 2u) << r.op;
        EXPECT_EQ(spec->operands[0].role, ArgRole::kRead) << r.op;
        EXPECT_EQ(spec->operands[1].role, ArgRole::kWrite) << r.op;
        break;
      case wire::AccessRule::kNoDeviceMemory:
      case wire::AccessRule::kKernel:
      case wire::AccessRule::kWhole: EXPECT_EQ(spec, nullptr) << r.op; break;
    }
    if (spec != nullptr) {
      EXPECT_STREQ(spec->call, r.api);
    }
  }
  EXPECT_EQ(FindCallSpec(wire::op::kMemcpyAsync)->call, std::string("cudaMemcpyAsync"));
}

}  // namespace
}  // namespace phos::session
