// The cuda backend's NCCL on a machine without a GPU: loading the library
// (backend/cuda/cuda_nccl.h), its results as Status, and a join refused by
// name when NCCL is not loaded. The book of NCCL ids: nccl_id_book_test.
// Running collectives needs a GPU: tests/gpu/cuda_backend_gpu_test.cc.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_nccl.h"

namespace phos::backend::cuda {
namespace {

TEST(CudaNcclTest, VersionTextReadsBothEncodings) {
  EXPECT_EQ(NcclVersionText(22809), "2.28.9");
  EXPECT_EQ(NcclVersionText(21400), "2.14.0");
  EXPECT_EQ(NcclVersionText(2307), "2.3.7");  // before 2.9: X*1000 + Y*100 + Z
}

TEST(CudaNcclTest, ResultsMapToStatusCodes) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x", nullptr).ok());
  EXPECT_EQ(NcclStatus(ncclRemoteError, "x", nullptr).code(), Status::Code::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclInvalidUsage, "x", nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NcclStatus(ncclInvalidArgument, "x", nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NcclStatus(ncclUnhandledCudaError, "x", nullptr).code(), Status::Code::kInternal);
  const Status s = NcclStatus(ncclSystemError, "ncclAllReduce (op 0 of the group)", nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("ncclAllReduce (op 0 of the group): ncclSystemError"), std::string::npos)
      << s.message();
  EXPECT_EQ(NcclResultName(static_cast<ncclResult_t>(42)), "ncclResult 42");
}

TEST(CudaNcclTest, MissingLibraryIsUnavailableNamingIt) {
  std::shared_ptr<const NcclLibrary> lib;
  const Status s = LoadNccl("/nonexistent/libnccl.so.2", &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("/nonexistent/libnccl.so.2"), std::string::npos) << s.message();
  EXPECT_EQ(lib, nullptr);
}

TEST(CudaNcclTest, NotNcclIsUnavailableNamingTheSymbol) {
  std::shared_ptr<const NcclLibrary> lib;
  const Status s = LoadNccl("libc.so.6", &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("ncclGetVersion"), std::string::npos) << s.message();
}

// setup.sh installs NCCL beside the toolkit; CMake passes its path.
TEST(CudaNcclTest, ToolkitLibraryResolvesEveryEntryPointAndMakesIds) {
  std::shared_ptr<const NcclLibrary> lib;
  const Status s = LoadNccl(PHOS_NCCL_LIBRARY, &lib);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(lib->version, kMinimumNcclVersion);
  EXPECT_EQ(lib->version, NCCL_VERSION_CODE) << "the library is not the NCCL of the header phos was built with";
  for (const void* fn : {reinterpret_cast<const void*>(lib->GetUniqueId), reinterpret_cast<const void*>(lib->CommInitRankConfig),
                         reinterpret_cast<const void*>(lib->CommFinalize), reinterpret_cast<const void*>(lib->CommAbort),
                         reinterpret_cast<const void*>(lib->GroupEnd), reinterpret_cast<const void*>(lib->AllReduce),
                         reinterpret_cast<const void*>(lib->Send), reinterpret_cast<const void*>(lib->Recv),
                         reinterpret_cast<const void*>(lib->RedOpCreatePreMulSum)}) {
    EXPECT_NE(fn, nullptr);
  }
  // A unique id needs no GPU (NCCL's bootstrap root: a socket of this
  // process); two ids differ.
  ncclUniqueId a{}, b{};
  ASSERT_EQ(lib->GetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(lib->GetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof a), 0);
}

TEST(CudaNcclTest, JoinWithoutNcclIsRefusedSayingWhyAndWhatToDo) {
  auto collectives = std::make_shared<CudaCollectives>(nullptr, nullptr, "dlopen libnccl.so.2 failed: not found");
  std::shared_ptr<CommRank> rank;
  const Status s = collectives->Join(CommunicatorId{}, 2, 0, 0, nullptr, nullptr, &rank);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_NE(s.message().find("dlopen libnccl.so.2 failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--nccl-library"), std::string::npos) << s.message();
  EXPECT_EQ(rank, nullptr);
}

}  // namespace
}  // namespace phos::backend::cuda
