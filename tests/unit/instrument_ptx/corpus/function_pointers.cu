// Indirect calls through a device function-pointer table, and printf (vprintf).
#include <cstdio>
__device__ int add1(int x) { return x + 1; }
__device__ int mul2(int x) { return x * 2; }
typedef int (*fn_t)(int);
__device__ fn_t table[2] = {add1, mul2};
__global__ void fptr(int* out, int w) {
  out[threadIdx.x] = table[w & 1](threadIdx.x);
  if (threadIdx.x == 0) printf("hello %d %f\n", w, 1.5);
}
