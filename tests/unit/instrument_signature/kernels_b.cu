// Source of the mangled kernel names hard-coded in signature_test.cc (not
// built). Names and .nv.info parameter tables were taken from nvcc 13.0.88:
//   nvcc -arch=sm_80 -std=c++17 -cubin -o k.cubin k.cu   (this file was k.cu,
//   kernels_b.cu was k2.cu: anonymous-namespace names embed the file name)
//   readelf -sW k.cubin | grep FUNC          (mangled names)
//   .nv.info.<kernel> EIATTR_KPARAM_INFO     (ordinal, offset, size)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
template <typename T> struct Wrap { int x; };
template <typename R> __global__ void refarg(Wrap<R> w, float* out) { out[0] = w.x; }
template __global__ void refarg<const float&>(Wrap<const float&>, float*);
namespace ns { template <typename T> struct Functor { T* dst; T v; }; enum class Color : int { r, g }; }
template <typename F> __global__ void apply(F f, const float* __restrict__ in, float* __restrict__ out) { out[0] = in[0]; }
template __global__ void apply<ns::Functor<int>>(ns::Functor<int>, const float*, float*);
template <typename... Ts> __global__ void variadic(Ts... args) { }
template __global__ void variadic<int*, const double*, long>(int*, const double*, long);
__global__ void colork(ns::Color c, __half h, __half2 h2, double2 d2, dim3 d) { }
namespace a { namespace { namespace b { struct S { int* p; }; __global__ void deep(S s, const S* const sp) { } } } }
void use() { a::b::deep<<<1,1>>>(a::b::S{}, nullptr); }
template <typename T, int N> struct Arr { T v[N]; };
template <typename T> __global__ void arrk(Arr<T, 3> a, T (*p)[3], volatile T* vp, const volatile T* cvp) { }
template __global__ void arrk<float>(Arr<float,3>, float (*)[3], volatile float*, const volatile float*);
template <auto V> __global__ void autok(int* p) { p[0] = (int)V; }
template __global__ void autok<ns::Color::g>(int*);
template __global__ void autok<'a'>(int*);
__global__ void lonk(long long a, unsigned char b, __int128 c, long double* ld, decltype(nullptr) np) {}
