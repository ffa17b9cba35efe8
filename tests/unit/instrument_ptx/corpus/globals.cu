// __device__ global variables (with and without initialisers) and __constant__ memory.
__device__ int g_counter;
__device__ float g_table[8] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
__device__ unsigned char g_bytes[5] = {1, 2, 3, 4, 5};
__device__ double g_scale = 0.5;
__constant__ float c_coeffs[16];
__constant__ int c_n = 3;
__constant__ long long c_big[2] = {1LL << 40, -5};

__global__ void use_globals(float* out) {
  int t = threadIdx.x;
  float s = 0;
  for (int k = 0; k < c_n; ++k) s += c_coeffs[k] * g_table[(t + k) & 7];
  out[t] = s * (float)g_scale + g_bytes[t % 5] + (float)c_big[t & 1];
  atomicAdd(&g_counter, 1);
}
