// vector_add: c[i] = a[i] + b[i]. The simplest kernel with const and
// non-const pointer parameters and a scalar (DESIGN §3 access sets:
// a, b read; c read+write; n ignored).
#include <vector>

#include "common.h"

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 50000;  // not a multiple of the block size: exercises the bounds check
  AppRng rng(0x5eed0001);
  std::vector<float> a(n), b(n), c(n, 0.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = rng.NextFloat();
    b[i] = rng.NextFloat();
  }
  float *da, *db, *dc;
  const size_t bytes = n * sizeof(float);
  APP_CHECK(cudaMalloc(&da, bytes));
  APP_CHECK(cudaMalloc(&db, bytes));
  APP_CHECK(cudaMalloc(&dc, bytes));
  APP_CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  APP_CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  APP_CHECK(cudaMemset(dc, 0, bytes));
  const int block = 256;
  vector_add<<<(n + block - 1) / block, block>>>(da, db, dc, n);
  APP_CHECK(cudaGetLastError());
  AppMidpoint("vector_add");  // c holds the sums on the device only
  APP_CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (int i = 0; i < n; ++i)
    if (c[i] != a[i] + b[i]) ++bad;
  APP_CHECK(cudaFree(da));
  APP_CHECK(cudaFree(db));
  APP_CHECK(cudaFree(dc));
  return AppReport("vector_add", AppFnv1a(c.data(), bytes), bad);
}
