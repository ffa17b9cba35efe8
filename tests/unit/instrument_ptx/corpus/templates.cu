// Template kernels instantiated for several types.
template <typename T, int K>
__global__ void scale(T* data, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    T v = data[i];
#pragma unroll
    for (int k = 0; k < K; ++k) v = v * factor;
    data[i] = v;
  }
}

template __global__ void scale<float, 2>(float*, float, int);
template __global__ void scale<double, 3>(double*, double, int);
template __global__ void scale<int, 1>(int*, int, int);
template __global__ void scale<short, 4>(short*, short, int);
template __global__ void scale<unsigned long long, 2>(unsigned long long*, unsigned long long, int);
