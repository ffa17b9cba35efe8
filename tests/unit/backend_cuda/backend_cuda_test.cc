// The cuda backend where there is no GPU (every CI machine): creating it
// fails with Unavailable and a message that says why, and the CUresult ->
// Status mapping is right even without a driver to name the codes.
#include <gtest/gtest.h>

#include <cuda.h>

#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_errors.h"
#include "backend/cuda/cuda_process_health.h"

namespace phos::backend::cuda {
namespace {

// "haystack contains needle", printing the haystack when it does not.
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

TEST(CudaBackendLoad, NonexistentLibraryIsUnavailableAndNamesIt) {
  CudaOptions options;
  options.driver_library = "/nonexistent/phos-test/libcuda.so.1";
  std::unique_ptr<Backend> backend;
  Status s = CreateCudaBackend(options, &backend);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_CONTAINS(s.message(), "/nonexistent/phos-test/libcuda.so.1");
  EXPECT_CONTAINS(s.message(), "no NVIDIA driver: dlopen");
  EXPECT_EQ(backend, nullptr);
}

TEST(CudaBackendLoad, DefaultLibraryWithoutDriverIsUnavailableWithReason) {
  std::unique_ptr<Backend> backend;
  Status s = CreateCudaBackend(CudaOptions{}, &backend);
  if (s.ok()) {
    GTEST_SKIP() << "a CUDA driver and GPU are present here (" << backend->detail()
                 << "); tests/gpu covers this case";
  }
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  const std::string& m = s.message();
  // Either the library is missing, or it loaded and cuInit / device discovery failed.
  const bool no_library = m.find("no NVIDIA driver: dlopen libcuda.so.1 failed") != std::string::npos;
  const bool no_device = m.find("cuInit failed") != std::string::npos ||
                         m.find("found no GPU") != std::string::npos;
  EXPECT_TRUE(no_library || no_device) << m;
}

TEST(CudaBackendLoad, StubLibraryFailsInCuInit) {
#ifndef PHOS_CUDA_STUB_LIBRARY
  GTEST_SKIP() << "the CUDA toolkit here has no stubs/libcuda.so";
#else
  CudaOptions options;
  options.driver_library = PHOS_CUDA_STUB_LIBRARY;
  std::unique_ptr<Backend> backend;
  Status s = CreateCudaBackend(options, &backend);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_CONTAINS(s.message(), "cuInit failed: CUDA_ERROR_");
  EXPECT_CONTAINS(s.message(), PHOS_CUDA_STUB_LIBRARY);
#endif
}

TEST(CudaBackendLoad, LibraryThatIsNotADriverNamesTheMissingSymbol) {
  CudaOptions options;
  options.driver_library = "libc.so.6";
  std::unique_ptr<Backend> backend;
  Status s = CreateCudaBackend(options, &backend);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_CONTAINS(s.message(), "libc.so.6 has no symbol cuInit");
}

TEST(CudaErrors, SuccessIsOk) {
  EXPECT_TRUE(CudaStatus(CUDA_SUCCESS, "anything", nullptr).ok());
  EXPECT_EQ(CudaResultCode(CUDA_SUCCESS), Status::Code::kOk);
}

TEST(CudaErrors, CommonCodesMapToTheirStatus) {
  struct Case {
    CUresult result;
    Status::Code code;
    const char* name;
  };
  const Case cases[] = {
      {CUDA_ERROR_INVALID_VALUE, Status::Code::kInvalidArgument, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_OUT_OF_MEMORY, Status::Code::kOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
      {CUDA_ERROR_NOT_READY, Status::Code::kNotReady, "CUDA_ERROR_NOT_READY"},
      {CUDA_ERROR_NO_DEVICE, Status::Code::kUnavailable, "CUDA_ERROR_NO_DEVICE"},
      {CUDA_ERROR_STUB_LIBRARY, Status::Code::kUnavailable, "CUDA_ERROR_STUB_LIBRARY"},
      {CUDA_ERROR_NOT_FOUND, Status::Code::kNotFound, "CUDA_ERROR_NOT_FOUND"},
      {CUDA_ERROR_INVALID_HANDLE, Status::Code::kInvalidArgument, "CUDA_ERROR_INVALID_HANDLE"},
      {CUDA_ERROR_INVALID_PTX, Status::Code::kInvalidArgument, "CUDA_ERROR_INVALID_PTX"},
      {CUDA_ERROR_ALREADY_MAPPED, Status::Code::kAlreadyExists, "CUDA_ERROR_ALREADY_MAPPED"},
      {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, Status::Code::kAlreadyExists,
       "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
      {CUDA_ERROR_NOT_SUPPORTED, Status::Code::kNotSupported, "CUDA_ERROR_NOT_SUPPORTED"},
      {CUDA_ERROR_NOT_INITIALIZED, Status::Code::kFailedPrecondition, "CUDA_ERROR_NOT_INITIALIZED"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, Status::Code::kInternal, "CUDA_ERROR_ILLEGAL_ADDRESS"},
      {CUDA_ERROR_LAUNCH_FAILED, Status::Code::kInternal, "CUDA_ERROR_LAUNCH_FAILED"},
      {CUDA_ERROR_UNKNOWN, Status::Code::kInternal, "CUDA_ERROR_UNKNOWN"},
  };
  for (const Case& c : cases) {
    Status s = CudaStatus(c.result, "cuSomething", nullptr);
    EXPECT_EQ(s.code(), c.code) << c.name << " -> " << s.ToString();
    EXPECT_EQ(CudaResultName(c.result, nullptr), c.name);
    EXPECT_EQ(s.message().rfind(std::string("cuSomething: ") + c.name, 0), 0u) << s.message();
  }
}

// What the app must see exactly rides on api_error (wire.h ToWire): the
// runtime tells "no kernel image for this GPU" (tolerated at registration)
// and each kernel fault apart.
TEST(CudaErrors, KernelFaultsAndNoBinaryCarryTheirExactCode) {
  for (CUresult r : {CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED,
                     CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_ASSERT, CUDA_ERROR_INVALID_PC}) {
    EXPECT_EQ(CudaStatus(r, "cuX", nullptr).api_error(), static_cast<int>(r)) << CudaResultName(r, nullptr);
  }
  EXPECT_EQ(CudaStatus(CUDA_ERROR_OUT_OF_MEMORY, "cuX", nullptr).api_error(), 0);
  EXPECT_EQ(CudaStatus(CUDA_ERROR_INVALID_VALUE, "cuX", nullptr).api_error(), 0);
}

// A kernel fault ends CUDA for the whole process (seen on an H200):
// ProcessHealth keeps the first cause and says what to do.
TEST(CudaProcessHealth, TheFirstKernelFaultIsKeptWithWhatToDo) {
  ProcessHealth h;
  EXPECT_TRUE(h.Check().ok());
  auto note = [&h](CUresult r, const char* what) { h.Note(r, CudaStatus(r, what, nullptr)); };
  note(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate");
  note(CUDA_ERROR_INVALID_VALUE, "cuMemcpy");
  EXPECT_TRUE(h.Check().ok()) << "only kernel faults end the process";
  note(CUDA_ERROR_ILLEGAL_ADDRESS, "cuCtxSynchronize");
  note(CUDA_ERROR_LAUNCH_FAILED, "cuStreamSynchronize");
  Status s = h.Check();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("LAUNCH_FAILED"), std::string::npos) << "the first cause stays: " << s.message();
  EXPECT_NE(s.message().find("restart phosd"), std::string::npos) << s.message();
  for (CUresult r : {CUDA_ERROR_ASSERT, CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_INVALID_PC,
                     CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_ILLEGAL_INSTRUCTION}) {
    EXPECT_TRUE(ProcessHealth::EndsTheProcess(r)) << r;
  }
  EXPECT_FALSE(ProcessHealth::EndsTheProcess(CUDA_ERROR_NO_BINARY_FOR_GPU));
  EXPECT_FALSE(ProcessHealth::EndsTheProcess(CUDA_ERROR_NOT_READY));
}

TEST(CudaErrors, MessageCarriesTheDescription) {
  Status s = CudaStatus(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate of 2097152 bytes", nullptr);
  EXPECT_EQ(s.message(), "cuMemCreate of 2097152 bytes: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  EXPECT_EQ(s.ToString().rfind("OutOfMemory", 0), 0u) << s.ToString();
}

TEST(CudaErrors, UnknownCodeIsNamedByNumber) {
  const auto weird = static_cast<CUresult>(12345);
  EXPECT_EQ(CudaResultName(weird, nullptr), "CUDA_ERROR_12345");
  Status s = CudaStatus(weird, "cuX", nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_EQ(s.message(), "cuX: CUDA_ERROR_12345");
}

TEST(CudaErrors, DriverWithoutErrorFunctionsUsesTheTable) {
  CudaDriver empty;  // GetErrorName / GetErrorString are null
  EXPECT_EQ(CudaResultName(CUDA_ERROR_INVALID_DEVICE, &empty), "CUDA_ERROR_INVALID_DEVICE");
  EXPECT_EQ(CudaResultDescription(CUDA_ERROR_INVALID_DEVICE, &empty), "invalid device ordinal");
}

TEST(CudaHelpers, DriverVersionText) {
  EXPECT_EQ(DriverVersionText(13000), "13.0");
  EXPECT_EQ(DriverVersionText(12080), "12.8");
  EXPECT_EQ(DriverVersionText(12090), "12.9");
}

TEST(CudaHelpers, UuidLooksLikeNvidiaSmi) {
  CUuuid uuid;
  for (int i = 0; i < 16; ++i) uuid.bytes[i] = static_cast<char>(0xa0 + i);
  EXPECT_EQ(FormatUuid(uuid), "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
}

}  // namespace
}  // namespace phos::backend::cuda
