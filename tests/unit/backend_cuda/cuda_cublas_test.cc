// Loading cuBLAS for the per-context handles (backend/cuda/cuda_cublas.h),
// on a machine without a GPU: loading needs no driver; creating handles
// (tests/gpu) does.
#include "backend/cuda/cuda_cublas.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

namespace phos::backend::cuda {
namespace {

TEST(CudaCublasTest, DefaultLibraryIsTheToolkitsSoname) {
  EXPECT_EQ(DefaultCublasLibrary(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}

TEST(CudaCublasTest, MissingLibraryIsUnavailableNamingIt) {
  std::shared_ptr<const CublasLibrary> lib;
  Status s = LoadCublas("/nonexistent/libcublas.so.13", &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("/nonexistent/libcublas.so.13"), std::string::npos) << s.message();
  EXPECT_EQ(lib, nullptr);
}

TEST(CudaCublasTest, NotCublasIsUnavailableNamingTheSymbol) {
  std::shared_ptr<const CublasLibrary> lib;
  Status s = LoadCublas("libc.so.6", &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("cublasCreate_v2"), std::string::npos) << s.message();
}

TEST(CudaCublasTest, ToolkitLibraryResolvesEveryEntryPoint) {
  void* probe = dlopen(DefaultCublasLibrary().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (probe == nullptr) GTEST_SKIP() << "skipped: no " << DefaultCublasLibrary() << " on this machine";
  std::shared_ptr<const CublasLibrary> lib;
  Status s = LoadCublas(DefaultCublasLibrary(), &lib);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(lib->Create, nullptr);
  EXPECT_NE(lib->Destroy, nullptr);
  EXPECT_NE(lib->GetVersion, nullptr);
  ASSERT_NE(lib->GetStatusString, nullptr);
  Status e = CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate_v2", lib.get());
  EXPECT_EQ(e.code(), Status::Code::kOutOfMemory);
  EXPECT_NE(e.message().find("cublasCreate_v2"), std::string::npos) << e.message();
}

TEST(CudaCublasTest, StatusMapping) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x", nullptr).ok());
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_NOT_INITIALIZED, "x", nullptr).code(), Status::Code::kUnavailable);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_INTERNAL_ERROR, "x", nullptr).code(), Status::Code::kInternal);
}

}  // namespace
}  // namespace phos::backend::cuda
