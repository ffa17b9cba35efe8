// saxpy_loop: y = a*x + y, launched many times on the default stream — a
// long-running loop of small launches to checkpoint in the middle of.
// The kernel uses fmaf explicitly so the CPU reference (std::fmaf) is exact.
#include <cmath>
#include <vector>

#include "common.h"

__global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a, x[i], y[i]);
}

int main(int argc, char** argv) {
  const int n = 1 << 14;
  // Iteration count may be raised on the command line (for C/R experiments);
  // the checksum printed depends on it.
  const int iters = argc > 1 ? std::atoi(argv[1]) : 64;
  AppRng rng(0x5eed0002);
  std::vector<float> x(n), y(n), ref(n);
  for (int i = 0; i < n; ++i) {
    x[i] = rng.NextFloat();
    y[i] = rng.NextFloat();
  }
  ref = y;
  float *dx, *dy;
  const size_t bytes = n * sizeof(float);
  APP_CHECK(cudaMalloc(&dx, bytes));
  APP_CHECK(cudaMalloc(&dy, bytes));
  APP_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
  APP_CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
  for (int it = 0; it < iters; ++it) {
    const float a = 0.5f + 0.001953125f * static_cast<float>(it % 16);  // exact in binary
    saxpy<<<(n + 127) / 128, 128>>>(a, dx, dy, n);
    APP_CHECK(cudaGetLastError());
    for (int i = 0; i < n; ++i) ref[i] = std::fmaf(a, x[i], ref[i]);
    if (it == iters / 2) AppMidpoint("saxpy_loop");  // y half-way through the loop
  }
  APP_CHECK(cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (int i = 0; i < n; ++i)
    if (!(y[i] == ref[i])) ++bad;
  APP_CHECK(cudaFree(dx));
  APP_CHECK(cudaFree(dy));
  return AppReport("saxpy_loop", AppFnv1a(y.data(), bytes), bad);
}
