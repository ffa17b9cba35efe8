// struct_of_pointers: the kernel takes a struct (by value) that holds device
// pointers. The access-set code must scan the aggregate in 8-byte words to
// find them (DESIGN §3). Integer arithmetic, so the reference is exact.
#include <vector>

#include "common.h"

struct Operands {
  const int* x;    // read
  const int* y;    // read
  int* out;        // written
  int* histogram;  // read+written (atomics)
  int n;
  int scale;
};

__global__ void combine(Operands op, int bins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < op.n) {
    int v = op.x[i] * op.scale + op.y[i];
    op.out[i] = v;
    atomicAdd(&op.histogram[static_cast<unsigned int>(v) % bins], 1);
  }
}

int main() {
  const int n = 10000;
  const int bins = 16;
  const int scale = 7;
  AppRng rng(0x5eed0004);
  std::vector<int> x(n), y(n), out(n), hist(bins);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<int>(rng.NextU32() % 100000u) - 50000;
    y[i] = static_cast<int>(rng.NextU32() % 100000u) - 50000;
  }
  Operands op{};
  int *dx, *dy, *dout, *dhist;
  APP_CHECK(cudaMalloc(&dx, n * sizeof(int)));
  APP_CHECK(cudaMalloc(&dy, n * sizeof(int)));
  APP_CHECK(cudaMalloc(&dout, n * sizeof(int)));
  APP_CHECK(cudaMalloc(&dhist, bins * sizeof(int)));
  APP_CHECK(cudaMemcpy(dx, x.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  APP_CHECK(cudaMemcpy(dy, y.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  APP_CHECK(cudaMemset(dhist, 0, bins * sizeof(int)));
  op.x = dx;
  op.y = dy;
  op.out = dout;
  op.histogram = dhist;
  op.n = n;
  op.scale = scale;
  combine<<<(n + 127) / 128, 128>>>(op, bins);
  APP_CHECK(cudaGetLastError());
  AppMidpoint("struct_of_pointers");  // out and the histogram on the device only
  APP_CHECK(cudaMemcpy(out.data(), dout, n * sizeof(int), cudaMemcpyDeviceToHost));
  APP_CHECK(cudaMemcpy(hist.data(), dhist, bins * sizeof(int), cudaMemcpyDeviceToHost));
  std::vector<int> ref_hist(bins, 0);
  size_t bad = 0;
  for (int i = 0; i < n; ++i) {
    int v = x[i] * scale + y[i];
    if (out[i] != v) ++bad;
    ref_hist[static_cast<unsigned int>(v) % bins]++;
  }
  for (int b = 0; b < bins; ++b)
    if (hist[b] != ref_hist[b]) ++bad;
  APP_CHECK(cudaFree(dx));
  APP_CHECK(cudaFree(dy));
  APP_CHECK(cudaFree(dout));
  APP_CHECK(cudaFree(dhist));
  uint64_t h = AppFnv1a(out.data(), n * sizeof(int));
  h = AppFnv1a(hist.data(), bins * sizeof(int), h);
  return AppReport("struct_of_pointers", h, bad);
}
