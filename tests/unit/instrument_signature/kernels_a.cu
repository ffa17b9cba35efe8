// Source of the mangled kernel names hard-coded in signature_test.cc (not
// built). Names and .nv.info parameter tables were taken from nvcc 13.0.88:
//   nvcc -arch=sm_80 -std=c++17 -cubin -o k.cubin k.cu   (this file was k.cu,
//   kernels_b.cu was k2.cu: anonymous-namespace names embed the file name)
//   readelf -sW k.cubin | grep FUNC          (mangled names)
//   .nv.info.<kernel> EIATTR_KPARAM_INFO     (ordinal, offset, size)
#include <cuda_runtime.h>
struct Ptrs { float* a; const float* b; int n; };
enum Mode { kA, kB };
enum class Scoped : unsigned char { x, y };
template <typename T> __global__ void tk(const T* in, T* out, int n) { int i = threadIdx.x; if (i < n) out[i] = in[i]; }
template __global__ void tk<float>(const float*, float*, int);
template __global__ void tk<double>(const double*, double*, int);
namespace outer { namespace inner { __global__ void nested(float* p, int n) { p[0] = n; } } }
namespace { __global__ void anon(int* p) { p[0] = 1; } }
void use_anon() { anon<<<1,1>>>(nullptr); }
template <typename T, const T& R> __global__ void refk(T* p) { p[0] = R; }
__device__ const int gval = 3;
template __global__ void refk<int, gval>(int*);
template <typename T> struct Holder { T* p; };
template <typename T> __global__ void holdk(Holder<T> h, const Holder<T>* hr) { h.p[0] = 1; }
template __global__ void holdk<float>(Holder<float>, const Holder<float>*);
__global__ void cpc(const float* const a, float* const b, const int* c) { b[0] = a[0] + c[0]; }
__global__ void structk(Ptrs s, Ptrs* sp) { s.a[0] = s.b[0]; }
__global__ void vec(float2 f, int4 i, float2* out, const int4* in) { out[0] = f; }
__global__ void pp(float** tab, const float* const* ctab, int n) { tab[0][0] = 1; }
__global__ void enumk(Mode m, Scoped s, int* out) { out[0] = m; }
extern "C" __global__ void ck(float* a, int n, double d, Ptrs s) { a[0] = n; }
__global__ void arr(float (*a)[4], unsigned long long x, char c, bool b, short sh) { a[0][0] = 1; }
__global__ void fptr(void (*f)(int), void* v, const void* cv) { }
template <typename T, int N> __global__ void tn(T* p) { p[0] = p[N+2]; }
template __global__ void tn<float, 4>(float*);
template __global__ void tn<Holder<double>, -2>(Holder<double>*);
