// NVRTC at test time (issue #16 item 4: the corpus "for JIT paths, produced
// by NVRTC at test time"): compiles a device-only CUDA C++ source to PTX the
// way JIT users do (CuPy's RawKernel, numba's cuda.compile via NVRTC for
// C++ sources). libnvrtc is opened with dlopen, so the test binary does not
// link it; CMake registers the NVRTC variant of the suite only when it found
// the library (PHOS_INTERP_NVRTC_LIBRARY is its path).
#pragma once

#include <dlfcn.h>
#include <nvrtc.h>

#include <map>
#include <string>
#include <vector>

#include "kernel_params.h"

namespace phos::interp::test {

class NvrtcCompiler {
 public:
  // The process's one compiler; "" from error() when it loaded.
  static NvrtcCompiler& Get() {
    static NvrtcCompiler c;
    return c;
  }
  const std::string& error() const { return error_; }

  // PTX for compute_90 of the CUDA C++ file at `path` (cached per path), or
  // "" with *why set: the compile log, or why NVRTC is unavailable.
  std::string Compile(const std::string& path, const std::vector<std::string>& include_dirs, std::string* why) {
    if (auto it = cache_.find(path); it != cache_.end()) return it->second;
    if (!error_.empty()) {
      *why = error_;
      return "";
    }
    const std::string source = phos::test::ReadTextFile(path);
    if (source.empty()) {
      *why = "cannot read " + path;
      return "";
    }
    nvrtcProgram prog = nullptr;
    if (nvrtcResult r = create_(&prog, source.c_str(), path.c_str(), 0, nullptr, nullptr); r != NVRTC_SUCCESS) {
      *why = "nvrtcCreateProgram: error " + std::to_string(r);
      return "";
    }
    std::vector<std::string> opts = {"--gpu-architecture=compute_90", "--std=c++17"};
    for (const std::string& d : include_dirs) opts.push_back("-I" + d);
    std::vector<const char*> argv;
    for (const std::string& o : opts) argv.push_back(o.c_str());
    const nvrtcResult r = compile_(prog, static_cast<int>(argv.size()), argv.data());
    size_t n = 0;
    std::string log;
    if (log_size_(prog, &n) == NVRTC_SUCCESS && n > 1) {
      log.resize(n);
      (void)log_(prog, log.data());
      log.resize(n - 1);
    }
    std::string ptx;
    if (r == NVRTC_SUCCESS && ptx_size_(prog, &n) == NVRTC_SUCCESS && n > 1) {
      ptx.resize(n);
      if (ptx_(prog, ptx.data()) == NVRTC_SUCCESS) ptx.resize(n - 1);
      else ptx.clear();
    }
    (void)destroy_(&prog);
    if (ptx.empty()) {
      *why = "NVRTC could not compile " + path + " (error " + std::to_string(r) + "):\n" + log;
      return "";
    }
    cache_.emplace(path, ptx);
    return ptx;
  }

 private:
  NvrtcCompiler() {
    const std::string lib = PHOS_INTERP_NVRTC_LIBRARY;
    if (lib.empty()) {
      error_ = "CMake found no libnvrtc: this build cannot compile with NVRTC";
      return;
    }
    handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      error_ = "dlopen " + lib + ": " + dlerror();
      return;
    }
    bool ok = Sym("nvrtcCreateProgram", &create_) && Sym("nvrtcCompileProgram", &compile_) &&
              Sym("nvrtcGetProgramLogSize", &log_size_) && Sym("nvrtcGetProgramLog", &log_) &&
              Sym("nvrtcGetPTXSize", &ptx_size_) && Sym("nvrtcGetPTX", &ptx_) &&
              Sym("nvrtcDestroyProgram", &destroy_);
    if (!ok) error_ = lib + " lacks an NVRTC entry point";
  }
  template <typename Fn>
  bool Sym(const char* name, Fn** out) {
    *out = reinterpret_cast<Fn*>(dlsym(handle_, name));
    return *out != nullptr;
  }

  void* handle_ = nullptr;  // never closed: the process's whole life
  std::string error_;
  std::map<std::string, std::string> cache_;  // path -> PTX (tests run on one thread)
  decltype(nvrtcCreateProgram)* create_ = nullptr;
  decltype(nvrtcCompileProgram)* compile_ = nullptr;
  decltype(nvrtcGetProgramLogSize)* log_size_ = nullptr;
  decltype(nvrtcGetProgramLog)* log_ = nullptr;
  decltype(nvrtcGetPTXSize)* ptx_size_ = nullptr;
  decltype(nvrtcGetPTX)* ptx_ = nullptr;
  decltype(nvrtcDestroyProgram)* destroy_ = nullptr;
};

}  // namespace phos::interp::test
