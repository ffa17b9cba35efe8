// Source of the thrust/CUB kernel names in signature_test.cc (not built).
// nvcc 13.0.88: nvcc -arch=sm_80 --extended-lambda -cubin -o t.cubin t.cu
// (this file was t.cu: the lambda's name embeds the enclosing function).
#include <thrust/device_vector.h>
#include <thrust/transform.h>
#include <thrust/reduce.h>
struct Saxpy { float a; __host__ __device__ float operator()(float x, float y) const { return a * x + y; } };
void run(thrust::device_vector<float>& x, thrust::device_vector<float>& y) {
  thrust::transform(x.begin(), x.end(), y.begin(), y.begin(), Saxpy{2.f});
  float s = thrust::reduce(x.begin(), x.end());
  (void)s;
  auto lam = [] __device__ (float v) { return v * 2; };
  thrust::transform(x.begin(), x.end(), y.begin(), lam);
}
