// JIT compilation and linking as numba, CuPy and other JIT users do it:
// CUDA C compiled at run time by NVRTC, linked by nvJitLink into a
// SASS-only cubin, loaded with cuModuleLoadData and launched. Three paths:
//   ptx   NVRTC -> PTX -> nvJitLink (one PTX input)
//   lto   NVRTC -dlto -> LTO-IR -> nvJitLink -lto
//   sass  NVRTC -arch=sm_XX -> its cubin (nvrtcGetCUBIN; CuPy's default)
// Under phos run on the sim, the cubin alone cannot run; the kernels run
// because phos's JIT shims attach their PTX (docs/interposer.md
// "JIT-compiled kernels keep their PTX"). On a GPU the program runs as is.
// Prints "jit_link: OK (ptx, lto, sass)" or what failed, and exits non-zero.
#include <cuda.h>
#include <nvJitLink.h>
#include <nvrtc.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

const char* kSource = R"(
extern "C" __global__ void poly(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] * x[i] + sinf(x[i]);
}
)";

bool Fail(const char* what, long code, const std::string& log = "") {
  std::printf("jit_link: %s failed (%ld)%s%s\n", what, code, log.empty() ? "" : ": ", log.c_str());
  return false;
}

// NVRTC: CUDA C -> PTX, or -> LTO-IR with `lto`.
bool Compile(const std::string& arch, bool lto, std::string* out) {
  nvrtcProgram prog;
  if (nvrtcResult r = nvrtcCreateProgram(&prog, kSource, "poly.cu", 0, nullptr, nullptr); r != NVRTC_SUCCESS)
    return Fail("nvrtcCreateProgram", r);
  const std::string arch_opt = "-arch=" + std::string(lto ? "sm_" : "compute_") + arch;
  std::vector<const char*> opts = {arch_opt.c_str()};
  if (lto) opts.push_back("-dlto");
  if (nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data()); r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    return Fail("nvrtcCompileProgram", r, log);
  }
  size_t n = 0;
  if (lto ? nvrtcGetLTOIRSize(prog, &n) : nvrtcGetPTXSize(prog, &n)) return Fail("nvrtcGet*Size", 0);
  out->assign(n, '\0');
  if (lto ? nvrtcGetLTOIR(prog, out->data()) : nvrtcGetPTX(prog, out->data())) return Fail("nvrtcGet*", 0);
  nvrtcDestroyProgram(&prog);
  return true;
}

// NVRTC straight to a cubin for the device's real architecture.
bool CompileToCubin(const std::string& arch, std::vector<char>* cubin) {
  nvrtcProgram prog;
  if (nvrtcResult r = nvrtcCreateProgram(&prog, kSource, "poly.cu", 0, nullptr, nullptr); r != NVRTC_SUCCESS)
    return Fail("nvrtcCreateProgram", r);
  const std::string arch_opt = "--gpu-architecture=sm_" + arch;
  const char* opts[] = {arch_opt.c_str(), "-default-device"};
  if (nvrtcResult r = nvrtcCompileProgram(prog, 2, opts); r != NVRTC_SUCCESS) return Fail("nvrtcCompileProgram", r);
  size_t n = 0;
  if (nvrtcResult r = nvrtcGetCUBINSize(prog, &n); r != NVRTC_SUCCESS || n == 0) return Fail("nvrtcGetCUBINSize", r);
  cubin->resize(n);
  if (nvrtcResult r = nvrtcGetCUBIN(prog, cubin->data()); r != NVRTC_SUCCESS) return Fail("nvrtcGetCUBIN", r);
  nvrtcDestroyProgram(&prog);
  return true;
}

// nvJitLink: one input -> cubin.
bool Link(const std::string& arch, bool lto, const std::string& input, std::vector<char>* cubin) {
  const std::string arch_opt = "-arch=sm_" + arch;
  std::vector<const char*> opts = {arch_opt.c_str()};
  if (lto) opts.push_back("-lto");
  nvJitLinkHandle h;
  if (nvJitLinkResult r = nvJitLinkCreate(&h, static_cast<uint32_t>(opts.size()), opts.data()); r != NVJITLINK_SUCCESS)
    return Fail("nvJitLinkCreate", r);
  const nvJitLinkInputType type = lto ? NVJITLINK_INPUT_LTOIR : NVJITLINK_INPUT_PTX;
  nvJitLinkResult r = nvJitLinkAddData(h, type, input.data(), input.size(), "poly");
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(h);
  if (r != NVJITLINK_SUCCESS) {
    size_t n = 0;
    nvJitLinkGetErrorLogSize(h, &n);
    std::string log(n, '\0');
    if (n > 0) nvJitLinkGetErrorLog(h, log.data());
    nvJitLinkDestroy(&h);
    return Fail("nvJitLinkAddData/Complete", r, log);
  }
  size_t n = 0;
  nvJitLinkGetLinkedCubinSize(h, &n);
  cubin->resize(n);
  r = nvJitLinkGetLinkedCubin(h, cubin->data());
  nvJitLinkDestroy(&h);
  return r == NVJITLINK_SUCCESS || Fail("nvJitLinkGetLinkedCubin", r);
}

// Loads the cubin, runs poly on random data and compares with the host.
bool Run(const std::vector<char>& cubin, const char* label) {
  CUmodule mod;
  CUfunction fn;
  if (CUresult r = cuModuleLoadData(&mod, cubin.data()); r != CUDA_SUCCESS) return Fail("cuModuleLoadData", r);
  if (CUresult r = cuModuleGetFunction(&fn, mod, "poly"); r != CUDA_SUCCESS) return Fail("cuModuleGetFunction", r);
  const int n = 1000;
  std::vector<float> x(n), y(n, -1.0f);
  unsigned seed = 12345;
  for (float& v : x) v = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 8) / (1 << 24) * 4.0f - 2.0f;
  CUdeviceptr dx, dy;
  if (cuMemAlloc(&dx, n * sizeof(float)) || cuMemAlloc(&dy, n * sizeof(float))) return Fail("cuMemAlloc", 0);
  if (cuMemcpyHtoD(dx, x.data(), n * sizeof(float))) return Fail("cuMemcpyHtoD", 0);
  float a = 1.5f;
  int count = n;
  void* params[] = {&dx, &dy, &a, &count};
  if (CUresult r = cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
      r != CUDA_SUCCESS)
    return Fail("cuLaunchKernel", r);
  if (CUresult r = cuMemcpyDtoH(y.data(), dy, n * sizeof(float)); r != CUDA_SUCCESS) return Fail("cuMemcpyDtoH", r);
  for (int i = 0; i < n; ++i) {
    const float want = a * x[i] * x[i] + std::sin(x[i]);
    if (std::fabs(y[i] - want) > 1e-4f * (1.0f + std::fabs(want))) {
      std::printf("jit_link: %s: y[%d] = %g, want %g\n", label, i, y[i], want);
      return false;
    }
  }
  cuMemFree(dx);
  cuMemFree(dy);
  cuModuleUnload(mod);
  return true;
}

}  // namespace

int main() {
  CUdevice dev;
  CUcontext ctx;
  int major = 0, minor = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
    std::printf("jit_link: no device\n");
    return 2;
  }
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  const std::string arch = std::to_string(major * 10 + minor);
  for (bool lto : {false, true}) {
    const char* label = lto ? "lto" : "ptx";
    std::string code;
    std::vector<char> cubin;
    if (!Compile(arch, lto, &code) || !Link(arch, lto, code, &cubin) || !Run(cubin, label)) {
      std::printf("jit_link: the %s path failed\n", label);
      return 1;
    }
  }
  std::vector<char> cubin;
  if (!CompileToCubin(arch, &cubin) || !Run(cubin, "sass")) {
    std::printf("jit_link: the sass path failed\n");
    return 1;
  }
  std::printf("jit_link: OK (ptx, lto, sass)\n");
  return 0;
}
