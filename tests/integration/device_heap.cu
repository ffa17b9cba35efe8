// Device-side malloc/free/new/delete under phos (docs/interposer.md "The
// device heap"): per-thread arrays malloc'ed by one kernel, summed and
// freed by another; polymorphic objects made with new in one kernel, used
// through their vtables in another, deleted in a third, three rounds (the
// heap's blocks are reused); a request larger than the heap is NULL;
// cudaLimitMallocHeapSize is set before the first launch and refused after
// it, as in CUDA. Checked against CPU references.
#define PHOS_PROGRAM_NAME "device_heap"
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "program_checks.h"

namespace {

struct Shape {
  __device__ virtual float Area() const = 0;
  __device__ virtual ~Shape() {}
};
struct Square : Shape {
  float side;
  __device__ explicit Square(float s) : side(s) {}
  __device__ float Area() const override { return side * side; }
};
struct Rect : Shape {
  float w, h;
  __device__ Rect(float a, float b) : w(a), h(b) {}
  __device__ float Area() const override { return w * h; }
};

__global__ void Build(Shape** shapes, int n, int round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (i % 2 == 0) shapes[i] = new Square(static_cast<float>(i + round));
  else shapes[i] = new Rect(static_cast<float>(i), static_cast<float>(round + 1));
}
__global__ void Areas(Shape* const* shapes, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = shapes[i] != nullptr ? shapes[i]->Area() : -1.0f;
}
__global__ void Destroy(Shape** shapes, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    delete shapes[i];
    shapes[i] = nullptr;
  }
}
__global__ void PerThreadArrays(int** ptrs, int n, int len) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int* p = static_cast<int*>(malloc(len * sizeof(int)));
  ptrs[i] = p;
  if (p != nullptr) {
    for (int k = 0; k < len; ++k) p[k] = i * k + 1;
  }
}
__global__ void SumAndFree(int** ptrs, long long* sums, int n, int len) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long s = -1;
  if (ptrs[i] != nullptr) {
    s = 0;
    for (int k = 0; k < len; ++k) s += ptrs[i][k];
    free(ptrs[i]);
  }
  sums[i] = s;
}
__global__ void TooBig(unsigned long long* out) { out[0] = reinterpret_cast<unsigned long long>(malloc(1ull << 40)); }

}  // namespace

int main() {
  const size_t heap = 32u << 20;
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, heap));
  const int n = 300, len = 50;
  int** d_ptrs = nullptr;
  long long* d_sums = nullptr;
  CHECK(cudaMalloc(&d_ptrs, n * sizeof(int*)));
  CHECK(cudaMalloc(&d_sums, n * sizeof(long long)));
  PerThreadArrays<<<(n + 127) / 128, 128>>>(d_ptrs, n, len);
  CHECK(cudaGetLastError());
  SumAndFree<<<(n + 127) / 128, 128>>>(d_ptrs, d_sums, n, len);
  std::vector<long long> sums(n);
  CHECK(cudaMemcpy(sums.data(), d_sums, n * sizeof(long long), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    long long want = 0;
    for (int k = 0; k < len; ++k) want += static_cast<long long>(i) * k + 1;
    if (sums[i] != want) PHOS_CHECK_FAIL(1, "thread %d's array summed to %lld, want %lld", i, sums[i], want);
  }
  std::printf("device_heap: malloc in one kernel, read and free in another: OK\n");
  // The limit cannot change once a kernel that uses malloc ran.
  EXPECT_ERR(cudaDeviceSetLimit(cudaLimitMallocHeapSize, heap * 2), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  size_t got = 0;
  CHECK(cudaDeviceGetLimit(&got, cudaLimitMallocHeapSize));
  EXPECT(got == heap);

  Shape** d_shapes = nullptr;
  float* d_areas = nullptr;
  CHECK(cudaMalloc(&d_shapes, n * sizeof(Shape*)));
  CHECK(cudaMalloc(&d_areas, n * sizeof(float)));
  std::vector<float> areas(n);
  for (int round = 0; round < 3; ++round) {
    Build<<<(n + 63) / 64, 64>>>(d_shapes, n, round);
    Areas<<<(n + 63) / 64, 64>>>(d_shapes, d_areas, n);
    Destroy<<<(n + 63) / 64, 64>>>(d_shapes, n);
    CHECK(cudaMemcpy(areas.data(), d_areas, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      const float want = i % 2 == 0 ? static_cast<float>(i + round) * static_cast<float>(i + round)
                                    : static_cast<float>(i) * static_cast<float>(round + 1);
      if (areas[i] != want) PHOS_CHECK_FAIL(1, "round %d shape %d: area %g, want %g", round, i, areas[i], want);
    }
  }
  std::printf("device_heap: new, virtual calls and delete across kernels, 3 rounds: OK\n");
  unsigned long long* d_big = nullptr;
  CHECK(cudaMalloc(&d_big, sizeof(unsigned long long)));
  CHECK(cudaMemset(d_big, 0xff, sizeof(unsigned long long)));
  TooBig<<<1, 1>>>(d_big);
  unsigned long long big = 1;
  CHECK(cudaMemcpy(&big, d_big, sizeof(big), cudaMemcpyDeviceToHost));
  EXPECT(big == 0);
  CHECK(cudaFree(d_big));
  CHECK(cudaFree(d_shapes));
  CHECK(cudaFree(d_areas));
  CHECK(cudaFree(d_ptrs));
  CHECK(cudaFree(d_sums));
  std::printf("device_heap: OK\n");
  return 0;
}
