// Kernels taking structs (with pointers inside) by value.
struct Args {
  const float* in;
  float* out;
  int n;
  float scale;
  double bias;
};

struct __align__(16) Vec4 { float x, y, z, w; };

__global__ void struct_param(Args a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.n) a.out[i] = a.in[i] * a.scale + (float)a.bias;
}

__global__ void vec_param(Vec4 v, Vec4* out, char tag, short s) {
  out[threadIdx.x] = Vec4{v.x + tag, v.y + s, v.z, v.w};
}
