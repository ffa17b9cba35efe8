// Kernels of the driver API test (driver_api.cu), loaded with
// cuModuleLoad*: as PTX text (nvcc -ptx, embedded by embed_ptx.cmake) and as
// an nvcc -fatbin image (sm_90 cubin + PTX, so parameter layouts come from
// the cubin's .nv.info). extern "C": the test looks them up by plain name.
// `mixed` takes 8-, 64-, 32-bit, struct and 16-bit parameters, so every
// offset in its parameter block matters.
struct Mixed {
  double scale;
  int offset;
  char tag;
  long long bias;
};
__device__ int counters[4];
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void mixed(char c, long long* out, int k, Mixed m, short s, double* dout) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < k) {
    out[i] = (long long)c * 1000000 + (long long)m.offset * 1000 + m.tag + m.bias * i + s;
    dout[i] = m.scale * i;
  }
}
extern "C" __global__ void bump(int v) { counters[threadIdx.x % 4] += v * (int)(threadIdx.x % 4 + 1); }
