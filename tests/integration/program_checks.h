// Check macros shared by the tests/integration CUDA programs. A program
// defines PHOS_PROGRAM_NAME ("runtime_api", ...) before including this; a
// failed check prints "<name>: line N: ..." (what the gtest side shows) and
// returns from the enclosing function:
//   CHECK(call)            a runtime call must return cudaSuccess; else return 2
//   EXPECT(cond)           else return 1
//   EXPECT_ERR(call, want) the call must return exactly `want`; else return 1
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>

#ifndef PHOS_PROGRAM_NAME
#error "define PHOS_PROGRAM_NAME before including program_checks.h"
#endif

// Line-buffered stdout, set before main: a program a test kills at its time
// limit (a hang, as seen on a GPU: docs/gpu-report.md) still shows every
// line it printed, so the log says how far it got.
namespace phos_program_checks {
inline const bool kStdoutLineBuffered = [] { return std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ) == 0; }();
}  // namespace phos_program_checks

#define PHOS_CHECK_FAIL(rc, ...)                                  \
  do {                                                            \
    std::printf("%s: line %d: ", PHOS_PROGRAM_NAME, __LINE__);    \
    std::printf(__VA_ARGS__);                                     \
    std::printf("\n");                                            \
    std::fflush(stdout);                                          \
    return rc;                                                    \
  } while (0)

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t check_e_ = (x);                                                               \
    if (check_e_ != cudaSuccess) PHOS_CHECK_FAIL(2, "%s failed: %s", #x, cudaGetErrorName(check_e_)); \
  } while (0)

#define EXPECT(c)                                       \
  do {                                                  \
    if (!(c)) PHOS_CHECK_FAIL(1, "expected %s", #c);    \
  } while (0)

#define EXPECT_ERR(call, want)                                                                         \
  do {                                                                                                 \
    cudaError_t check_e_ = (call);                                                                     \
    if (check_e_ != (want))                                                                            \
      PHOS_CHECK_FAIL(1, "%s returned %s, expected %s", #call, cudaGetErrorName(check_e_),             \
                      cudaGetErrorName(want));                                                         \
  } while (0)
