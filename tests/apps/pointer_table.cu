// pointer_table: the kernel writes through a table of pointers that lives in
// device memory. Its arguments name only the table and the source, so the
// speculated write set (DESIGN §3) misses the destination buffers: this is
// the mis-speculation case that validation must catch.
#include <vector>

#include "common.h"

// dst_table[t] points at buffer t; element i goes to buffer i % tables,
// slot i / tables.
__global__ void scatter(int* const* dst_table, int tables, const int* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int* dst = dst_table[i % tables];
    dst[i / tables] = src[i] * 3 + 1;
  }
}

int main() {
  const int tables = 4;
  const int per_table = 1024;
  const int n = tables * per_table;
  AppRng rng(0x5eed0005);
  std::vector<int> src(n);
  for (int i = 0; i < n; ++i) src[i] = static_cast<int>(rng.NextU32() >> 4);
  int* dsrc;
  APP_CHECK(cudaMalloc(&dsrc, n * sizeof(int)));
  APP_CHECK(cudaMemcpy(dsrc, src.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<int*> bufs(tables);
  for (int t = 0; t < tables; ++t) {
    APP_CHECK(cudaMalloc(&bufs[t], per_table * sizeof(int)));
    APP_CHECK(cudaMemset(bufs[t], 0, per_table * sizeof(int)));
  }
  int** dtable;
  APP_CHECK(cudaMalloc(&dtable, tables * sizeof(int*)));
  APP_CHECK(cudaMemcpy(dtable, bufs.data(), tables * sizeof(int*), cudaMemcpyHostToDevice));
  scatter<<<(n + 255) / 256, 256>>>(dtable, tables, dsrc, n);
  APP_CHECK(cudaGetLastError());
  AppMidpoint("pointer_table");  // the scattered buffers on the device only
  std::vector<int> out(n);
  for (int t = 0; t < tables; ++t)
    APP_CHECK(cudaMemcpy(out.data() + t * per_table, bufs[t], per_table * sizeof(int),
                         cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (int i = 0; i < n; ++i)
    if (out[(i % tables) * per_table + i / tables] != src[i] * 3 + 1) ++bad;
  for (int t = 0; t < tables; ++t) APP_CHECK(cudaFree(bufs[t]));
  APP_CHECK(cudaFree(dtable));
  APP_CHECK(cudaFree(dsrc));
  return AppReport("pointer_table", AppFnv1a(out.data(), n * sizeof(int)), bad);
}
