// A program that loads the CUDA driver itself, the way Triton and PyTorch's
// lazy loader do: dlopen("libcuda.so.1") and dlsym() through the handle,
// with no link-time CUDA dependency. Under `phos run` the handle must be
// libphos.so (its driver shim), so the calls reach phosd. Prints
// "dlopen_driver: <count> <name> OK" or what failed (exit 1).
#include <dlfcn.h>

#include <cstdio>

using CUresult = int;
using CUdevice = int;

int main() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::printf("dlopen_driver: dlopen(libcuda.so.1) failed: %s\n", dlerror());
    return 1;
  }
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CUresult (*)(int*)>(dlsym(h, "cuDeviceGetCount"));
  auto get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(h, "cuDeviceGet"));
  auto name = reinterpret_cast<CUresult (*)(char*, int, CUdevice)>(dlsym(h, "cuDeviceGetName"));
  // Only libphos.so exports this (a phos test hook): proves which library the handle is.
  void* phos_only = dlsym(h, "phosGetHostCopyStats");
  if (!init || !count || !get || !name) {
    std::printf("dlopen_driver: missing driver symbols\n");
    return 1;
  }
  if (phos_only == nullptr) {
    std::printf("dlopen_driver: the handle is not libphos.so (the real driver was loaded)\n");
    return 1;
  }
  int n = 0;
  CUdevice dev = 0;
  char buf[256] = {};
  CUresult r;
  if ((r = init(0)) != 0 || (r = count(&n)) != 0 || (r = get(&dev, 0)) != 0 || (r = name(buf, sizeof buf, dev)) != 0) {
    std::printf("dlopen_driver: driver call failed with %d\n", r);
    return 1;
  }
  std::printf("dlopen_driver: %d %s OK\n", n, buf);
  return 0;
}
