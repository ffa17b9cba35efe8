// The profiler API (cuda_profiler_api.h, cudaProfiler.h): start and stop are
// accepted. Under phos the app's GPU work runs in phosd, so no profiler can
// attach to the app's CUDA; without an attached profiler CUDA's own
// cudaProfilerStart/Stop do nothing and succeed, and so do these. Programs
// call them around a region they measure, or at exit.
// (cuProfilerInitialize, deprecated since CUDA 11, stays refused.)
#include <cuda.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"

using namespace phos::client;  // NOLINT

PHOS_EXPORT cudaError_t cudaProfilerStart() {
  if (cudaError_t s = StickyError(); s != cudaSuccess) return SetError(s);
  return cudaSuccess;
}
PHOS_EXPORT cudaError_t cudaProfilerStop() {
  if (cudaError_t s = StickyError(); s != cudaSuccess) return SetError(s);
  return cudaSuccess;
}
// The driver's act on the current context: without one they say so.
PHOS_EXPORT CUresult cuProfilerStart() { return CheckContext(); }
PHOS_EXPORT CUresult cuProfilerStop() { return CheckContext(); }
